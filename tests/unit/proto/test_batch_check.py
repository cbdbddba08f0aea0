"""Issue 28.2: the publish-time check of a batch's framing (proto/batch_check.py)."""

from __future__ import annotations

import random

import pytest

from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.batch_check import batch_framing_problem, send_problem
from magnetar.proto.messages import build_batch


def _meta(count: int | None, **fields: object) -> pb.MessageMetadata:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1, **fields)  # type: ignore[arg-type]
    if count is not None:
        metadata.num_messages_in_batch = count
    return metadata


SHAPES = [
    {"payload_size": 3},
    {"payload_size": 3, "sequence_id": 7},
    {"payload_size": 3, "sequence_id": 1 << 40},
    {"payload_size": 3, "partition_key": "k", "event_time": 9},
    {"payload_size": 3, "properties": [pb.KeyValue(key="a", value="b")], "ordering_key": b"o"},
]


@pytest.mark.parametrize("shape", SHAPES, ids=range(len(SHAPES)))
def test_well_formed_batches_pass(shape: dict[str, object]) -> None:
    body = build_batch([(pb.SingleMessageMetadata(**shape), b"abc")] * 4)  # type: ignore[arg-type]
    assert batch_framing_problem(body, 4) is None
    assert send_problem(_meta(4), b"head" + body, 4, 4) is None
    assert send_problem(_meta(4), b"head" + body, 4, 1) is None


def test_large_payload_sizes_take_the_parsed_path() -> None:
    body = build_batch(
        [(pb.SingleMessageMetadata(payload_size=1000, sequence_id=3), b"x" * 1000)] * 3
    )
    assert batch_framing_problem(body, 3) is None


@pytest.mark.parametrize("count", [1, 3, 5])
def test_wrong_counts_are_found(count: int) -> None:
    body = build_batch([(pb.SingleMessageMetadata(payload_size=2, sequence_id=1), b"ab")] * 4)
    assert batch_framing_problem(body, count) is not None
    assert send_problem(_meta(count), body, 0, count) is not None


def test_random_bytes_never_pass_as_a_larger_batch() -> None:
    rng = random.Random(28)
    for _ in range(2000):
        body = rng.randbytes(rng.randrange(0, 101))
        for count in (5, 1_000_000):
            assert send_problem(_meta(count), body, 0, 1) is not None


def test_a_later_payload_size_wins_as_protobuf_says() -> None:
    """A second payload_size field (last one wins for every parser) cannot
    smuggle a size past the walk."""
    first = pb.SingleMessageMetadata(payload_size=1).SerializeToString()
    second = pb.SingleMessageMetadata(payload_size=200).SerializeToString()
    meta = first + second
    body = len(meta).to_bytes(4, "big") + meta + b"x"
    assert batch_framing_problem(body, 1) is not None


def test_undecodable_single_metadata_is_found() -> None:
    body = (3).to_bytes(4, "big") + b"\xff\xff\xff" + b"x"
    assert batch_framing_problem(body, 1) is not None


def test_compressed_and_encrypted_batches_are_bounded_not_walked() -> None:
    compressed = _meta(10, compression=pb.LZ4, uncompressed_size=100)
    assert send_problem(compressed, b"opaque", 0, 10) is None
    assert send_problem(_meta(17, compression=pb.LZ4, uncompressed_size=100), b"z", 0, 1)
    encrypted = _meta(3, encryption_keys=[pb.EncryptionKeys(key="k", value=b"v")])
    assert send_problem(encrypted, b"c" * 40, 0, 3) is None
    assert send_problem(
        _meta(10, encryption_keys=[pb.EncryptionKeys(key="k", value=b"v")]), b"c" * 40, 0, 3
    )


def test_send_count_is_bounded_by_the_metadata() -> None:
    body = build_batch([(pb.SingleMessageMetadata(payload_size=1), b"x")] * 2)
    assert send_problem(_meta(2), body, 0, 3) is not None
    assert send_problem(_meta(2), body, 0, 0) is not None
    assert send_problem(_meta(None), b"plain", 0, 1) is None
    assert send_problem(_meta(None), b"plain", 0, 2) is not None
    assert send_problem(_meta(None, num_chunks_from_msg=3, chunk_id=0), b"chunk", 0, 1) is None
