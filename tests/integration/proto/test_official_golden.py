"""Golden interop: decode with our codec what the official client really sends.

A fake broker (our encoder answering by hand) lets the official `pulsar-client`
connect, look up, create a producer and publish; the test then checks that our
FrameDecoder and batch parser read back exactly what the application sent.
"""

from __future__ import annotations

from typing import Any

import lz4.block
import pulsar
import pytest

from magnetar.proto import messages, pulsar_api_pb2 as pb
from magnetar.proto.frames import Frame
from tests.support.fake_broker import FakeBroker, RecordedSend
from tests.support.official import official_client

pytestmark = pytest.mark.official

T = pb.BaseCommand
TOPIC = "persistent://public/default/golden"


def _publish(
    producer_options: dict[str, Any], messages_to_send: list[dict[str, Any]]
) -> tuple[FakeBroker, list[RecordedSend]]:
    """Publish with the official client; return the broker and what it received."""
    with FakeBroker() as broker, official_client(broker.url) as client:
        producer = client.create_producer(TOPIC, producer_name="golden", **producer_options)
        ids: list[Any] = []
        for message in messages_to_send:
            producer.send_async(
                message.pop("content"), lambda res, msg_id: ids.append((res, msg_id)), **message
            )
        producer.flush()
        producer.close()
        assert [res for res, _ in ids] == [pulsar.Result.Ok] * len(messages_to_send)
        return broker, list(broker.sends)


def test_connect_and_lookup_frames_decode() -> None:
    with FakeBroker() as broker, official_client(broker.url) as client:
        producer = client.create_producer(TOPIC, producer_name="golden")
        producer.close()
        connect = broker.wait_for_frame(T.CONNECT).command.connect
        metadata_request = broker.wait_for_frame(T.PARTITIONED_METADATA)
        producer_frame = broker.wait_for_frame(T.PRODUCER)
    assert connect.client_version.startswith("Pulsar-CPP")
    assert connect.protocol_version >= 12
    assert metadata_request.command.partitionMetadata.topic == TOPIC
    request = producer_frame.command.producer
    assert request.topic == TOPIC
    assert request.producer_name == "golden"
    assert request.producer_access_mode == pb.Shared
    assert broker.frames[0].type == T.CONNECT
    assert broker.errors == []


def test_single_message_send_decodes() -> None:
    broker, sends = _publish(
        {"batching_enabled": False},
        [
            {
                "content": b"hello magnetar",
                "properties": {"colour": "blue", "size": "3"},
                "partition_key": "k-1",
                "event_timestamp": 1_700_000_000_123,
            }
        ],
    )
    assert broker.errors == []
    assert len(sends) == 1
    send = sends[0]
    assert send.frame.command.send.producer_id == send.producer.producer_id
    assert send.frame.command.send.sequence_id == 0
    assert send.frame.payload is not None and send.frame.payload.checksum is not None
    meta = send.metadata
    assert not messages.is_batch(meta)
    assert messages.message_count(meta) == 1
    assert meta.producer_name == "golden"
    assert meta.sequence_id == 0
    assert messages.publish_time(meta) > 1_600_000_000_000
    assert messages.event_time(meta) == 1_700_000_000_123
    assert messages.properties(meta) == {"colour": "blue", "size": "3"}
    assert messages.partition_key(meta) == "k-1"
    assert messages.sticky_key(meta) == b"k-1"
    assert meta.compression == pb.NONE
    assert send.payload == b"hello magnetar"


def _batch_messages(payload_size: int) -> list[dict[str, Any]]:
    return [
        {
            "content": (f"message-{i}:".encode() * payload_size)[: max(payload_size, 10)],
            "properties": {"index": str(i), "parity": "even" if i % 2 == 0 else "odd"},
            "partition_key": f"key-{i % 3}",
        }
        for i in range(10)
    ]


def _assert_batch(sends: list[RecordedSend], expected: list[dict[str, Any]], body: bytes) -> None:
    assert len(sends) == 1
    send = sends[0]
    assert send.frame.command.send.num_messages == 10
    assert send.frame.command.send.sequence_id == 0
    meta = send.metadata
    assert messages.is_batch(meta)
    assert messages.message_count(meta) == 10
    parts = messages.split_batch(body, meta.num_messages_in_batch)
    assert [payload for _, payload in parts] == [m["content"] for m in expected]
    assert [messages.properties(single) for single, _ in parts] == [
        m["properties"] for m in expected
    ]
    assert [messages.partition_key(single) for single, _ in parts] == [
        m["partition_key"] for m in expected
    ]
    assert [single.sequence_id for single, _ in parts] == list(range(10))
    # Our builder produces the very bytes the official client sent.
    assert messages.build_batch(parts) == body


def test_batch_of_ten_with_properties_and_keys_decodes() -> None:
    expected = _batch_messages(12)
    broker, sends = _publish(
        {
            "batching_enabled": True,
            "batching_max_messages": 10,
            "batching_max_publish_delay_ms": 10_000,
        },
        [dict(m) for m in expected],
    )
    assert broker.errors == []
    assert sends[0].metadata.compression == pb.NONE
    _assert_batch(sends, expected, sends[0].payload)


def test_lz4_compressed_batch_decodes() -> None:
    expected = _batch_messages(200)
    broker, sends = _publish(
        {
            "batching_enabled": True,
            "batching_max_messages": 10,
            "batching_max_publish_delay_ms": 10_000,
            "compression_type": pulsar.CompressionType.LZ4,
        },
        [dict(m) for m in expected],
    )
    assert broker.errors == []
    meta = sends[0].metadata
    assert meta.compression == pb.LZ4
    compressed = sends[0].payload
    assert len(compressed) < meta.uncompressed_size
    body = lz4.block.decompress(compressed, uncompressed_size=meta.uncompressed_size)
    assert len(body) == meta.uncompressed_size
    _assert_batch(sends, expected, body)


def test_send_receipt_reaches_the_application() -> None:
    """Our hand-encoded SEND_RECEIPT is what the official client reports as the id."""
    with FakeBroker() as broker, official_client(broker.url) as client:
        producer = client.create_producer(TOPIC, batching_enabled=False)
        first = producer.send(b"one")
        second = producer.send(b"two")
        producer.close()
    assert (first.ledger_id(), first.entry_id()) == (1, 0)
    assert (second.ledger_id(), second.entry_id()) == (1, 1)
    frames: list[Frame] = broker.frames_of(T.SEND)
    assert [f.command.send.sequence_id for f in frames] == [0, 1]
