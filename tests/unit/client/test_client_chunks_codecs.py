"""Chunk reassembly (SEM-8.2), codecs (SEM-8.4) and service URLs."""

from __future__ import annotations

import os

import lz4.block
import pytest

from magnetar.client.aio import compression
from magnetar.client.aio.consumer.chunking import ChunkAssembler
from magnetar.client.aio.enums import CompressionType
from magnetar.client.aio.errors import InvalidMessage, InvalidUrl
from magnetar.client.aio.net.lookup import ServiceUrl, address_of
from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.ids import MessageId


def _chunk(uuid: str, chunk_id: int, num: int, total: int) -> pb.MessageMetadata:
    return pb.MessageMetadata(
        producer_name="p", sequence_id=1, publish_time=1, uuid=uuid, chunk_id=chunk_id,
        num_chunks_from_msg=num, total_chunk_msg_size=total,
    )  # fmt: skip


def test_chunks_in_order_make_the_message() -> None:
    assembler = ChunkAssembler()
    parts = [b"abc", b"def", b"g"]
    results = [
        assembler.add(_chunk("u", i, 3, 7), part, MessageId(1, i)) for i, part in enumerate(parts)
    ]
    assert results[:2] == [None, None]
    assert results[2] is not None
    assert results[2].payload == b"abcdefg"
    assert results[2].chunk_ids == (MessageId(1, 0), MessageId(1, 1), MessageId(1, 2))
    assert assembler.pending_count == 0


def test_chunk_without_its_start_is_dropped() -> None:
    assembler = ChunkAssembler()
    assert assembler.add(_chunk("u", 1, 2, 4), b"cd", MessageId(1, 5)) is None
    assert [ids for _, ids in assembler.take_dropped()] == [(MessageId(1, 5),)]


def test_too_many_incomplete_messages_drop_the_oldest() -> None:
    assembler = ChunkAssembler(max_pending=2)
    for n, uuid in enumerate(["a", "b", "c"]):
        assembler.add(_chunk(uuid, 0, 2, 2), b"x", MessageId(1, n))
    dropped = assembler.take_dropped()
    assert len(dropped) == 1 and dropped[0][1] == (MessageId(1, 0),)
    assert assembler.add(_chunk("c", 1, 2, 2), b"y", MessageId(1, 9)) is not None


def test_incomplete_messages_expire() -> None:
    now = [0.0]
    assembler = ChunkAssembler(expire_after=60, clock=lambda: now[0])
    assembler.add(_chunk("old", 0, 2, 2), b"x", MessageId(1, 0))
    now[0] = 61
    assert assembler.add(_chunk("new", 0, 2, 2), b"x", MessageId(1, 1)) is None
    assert [reason for reason, _ in assembler.take_dropped()] == ["old expired incomplete"]
    assert assembler.add(_chunk("old", 1, 2, 2), b"y", MessageId(1, 2)) is None


@pytest.mark.parametrize("codec", list(CompressionType))
def test_codecs_round_trip(codec: CompressionType) -> None:
    data = os.urandom(100) + b"repeat" * 500
    packed = compression.compress(codec, data)
    assert compression.decompress(codec, packed, len(data)) == data
    if codec != CompressionType.NONE:
        assert len(packed) < len(data)


def test_lz4_is_the_raw_block_format() -> None:
    """The official clients send LZ4 blocks without a size prefix (size in metadata)."""
    data = b"hello hello hello hello"
    assert compression.compress(CompressionType.LZ4, data) == lz4.block.compress(
        data, store_size=False
    )


def test_corrupt_or_short_payloads_raise_invalid_message() -> None:
    with pytest.raises(InvalidMessage):
        compression.decompress(CompressionType.ZLib, b"not zlib", 10)
    packed = compression.compress(CompressionType.ZLib, b"12345")
    with pytest.raises(InvalidMessage, match="metadata says 6"):
        compression.decompress(CompressionType.ZLib, packed, 6)


def test_service_urls() -> None:
    assert ServiceUrl.parse("pulsar://a:1,b:2/").addresses == ("a:1", "b:2")
    assert ServiceUrl.parse("pulsar://host").addresses == ("host:6650",)
    assert ServiceUrl.parse("http://host").addresses == ("host:8080",)
    assert address_of("pulsar://10.0.0.1:6650") == "10.0.0.1:6650"
    tls = ServiceUrl.parse("pulsar+ssl://host")
    assert (tls.addresses, tls.uses_tls) == (("host:6651",), True)
    assert ServiceUrl.parse("https://host").addresses == ("host:8443",)
    for bad in ("kafka://x:1", "pulsar://", "ftp://x:6651"):
        with pytest.raises(InvalidUrl):
            ServiceUrl.parse(bad)
