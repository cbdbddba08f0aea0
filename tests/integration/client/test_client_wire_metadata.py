"""What our producer puts on the wire, read back from the SEND frames a fake broker records."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta

import pytest

from magnetar import client as magnetar
from magnetar.client.aio.message import LOCAL_CLUSTER_ONLY
from magnetar.proto import messages
from magnetar.proto.frames import DEFAULT_MAX_MESSAGE_SIZE
from tests.support.fake_broker import FakeBroker

TOPIC = "persistent://public/default/wire"


@pytest.fixture
def broker() -> Iterator[FakeBroker]:
    with FakeBroker(max_message_size=64 * 1024) as fake:
        yield fake


@pytest.fixture
def client(broker: FakeBroker) -> Iterator[magnetar.Client]:
    c = magnetar.Client(broker.url, operation_timeout_seconds=5)
    yield c
    c.close()


def test_single_message_metadata(broker: FakeBroker, client: magnetar.Client) -> None:
    producer = client.create_producer(TOPIC, producer_name="wire", initial_sequence_id=9)
    before = int(time.time() * 1000)
    producer.send(
        b"body",
        properties={"z": "1", "a": "2"},
        partition_key="pk",
        ordering_key="ok",
        event_timestamp=55,
        deliver_after=timedelta(seconds=30),
        replication_clusters=["east", "west"],
    )
    producer.send(b"local", disable_replication=True, deliver_at=123)
    producer.send(None)
    first, second, null = broker.wait_for_sends(3)
    meta = first.metadata
    assert first.payload == b"body"
    assert (meta.producer_name, meta.sequence_id) == ("wire", 10)
    assert first.frame.command.send.sequence_id == 10
    assert before <= meta.publish_time <= int(time.time() * 1000)
    assert [(kv.key, kv.value) for kv in meta.properties] == [("a", "2"), ("z", "1")]
    assert (meta.partition_key, meta.ordering_key, meta.event_time) == ("pk", b"ok", 55)
    assert before + 30_000 <= meta.deliver_at_time <= int(time.time() * 1000) + 30_000
    assert list(meta.replicate_to) == ["east", "west"]
    assert meta.uncompressed_size == 4 and not meta.HasField("num_messages_in_batch")
    assert list(second.metadata.replicate_to) == [LOCAL_CLUSTER_ONLY]
    assert second.metadata.deliver_at_time == 123
    assert null.metadata.null_value and null.payload == b""
    assert producer.last_sequence_id() == 12


def test_batch_metadata_and_sequence_range(broker: FakeBroker, client: magnetar.Client) -> None:
    """SEND carries the batch's first sequence id, highest_sequence_id and num_messages."""
    producer = client.create_producer(
        TOPIC, batching_enabled=True, batching_max_publish_delay_ms=60_000,
        compression_type=magnetar.CompressionType.ZLib,
    )  # fmt: skip
    for i in range(5):
        producer.send_async(b"m%d" % i, None, properties={"i": str(i)})
    producer.flush()
    (send,) = broker.wait_for_sends(1)
    command = send.frame.command.send
    assert (command.sequence_id, command.highest_sequence_id, command.num_messages) == (0, 4, 5)
    meta = send.metadata
    assert meta.num_messages_in_batch == 5 and meta.compression == 2  # ZLIB
    from magnetar.client.aio.compression import decompress

    raw = decompress(meta.compression, send.payload, meta.uncompressed_size)
    items = messages.split_batch(raw, 5)
    assert [p for _, p in items] == [b"m%d" % i for i in range(5)]
    assert [messages.properties(m) for m, _ in items] == [{"i": str(i)} for i in range(5)]


def test_chunks_on_the_wire(broker: FakeBroker, client: magnetar.Client) -> None:
    """SEM-8.2: the broker's advertised max_message_size drives chunking; chunks share the id."""
    producer = client.create_producer(TOPIC, chunking_enabled=True, producer_name="chunky")
    big = bytes(range(256)) * 1000  # 256,000 bytes over a 64 KiB limit
    producer.send(big)
    sends = broker.wait_for_sends(4)  # 256,000 bytes in chunks of almost 64 KiB
    metas = [s.metadata for s in sends]
    assert len(sends) == 4 and all(messages.is_chunk(m) for m in metas)
    assert [m.chunk_id for m in metas] == list(range(4))
    assert {m.num_chunks_from_msg for m in metas} == {4}
    assert {m.total_chunk_msg_size for m in metas} == {len(big)}
    assert len({m.uuid for m in metas}) == 1
    assert {s.frame.command.send.sequence_id for s in sends} == {0}
    assert all(s.frame.command.send.is_chunk for s in sends)
    assert b"".join(s.payload for s in sends) == big
    assert all(
        s.frame.payload is not None and len(s.frame.payload.data) <= 64 * 1024 for s in sends
    )


def test_too_big_without_chunking(broker: FakeBroker, client: magnetar.Client) -> None:
    producer = client.create_producer(TOPIC)
    with pytest.raises(magnetar.MessageTooBig):
        producer.send(b"x" * (64 * 1024))
    assert DEFAULT_MAX_MESSAGE_SIZE > 64 * 1024


def test_send_async_queue_full_reports_through_the_callback(broker: FakeBroker) -> None:
    """Official behaviour: a full queue without blocking answers ProducerQueueIsFull."""
    broker._handlers[6] = lambda conn, frame: []  # SEND: never answered
    # close() waits up to the operation timeout for the receipts that never come.
    with magnetar.Client(broker.url, operation_timeout_seconds=1) as client:
        producer = client.create_producer(TOPIC, max_pending_messages=2, send_timeout_millis=0)
        results: list[object] = []
        for _ in range(3):
            producer.send_async(b"x", lambda result, msg_id: results.append(result))
        assert results == [magnetar.Result.ProducerQueueIsFull]
        with pytest.raises(magnetar.ProducerQueueIsFull):
            producer.send(b"y")


def test_closed_client_refuses_sends(broker: FakeBroker) -> None:
    client = magnetar.Client(broker.url, operation_timeout_seconds=5)
    producer = client.create_producer(TOPIC)
    assert producer.is_connected()
    client.close()
    client.close()
    assert not producer.is_connected()
    with pytest.raises(magnetar.AlreadyClosed):
        producer.send(b"late")
    with pytest.raises(magnetar.AlreadyClosed):
        producer.send_async(b"late", None)
    producer.close()  # closing after the client is a no-op


def test_block_if_queue_full_waits_instead_of_failing(
    broker: FakeBroker, client: magnetar.Client
) -> None:
    """block_if_queue_full: send_async waits for room; every message is sent, in order."""
    producer = client.create_producer(TOPIC, max_pending_messages=2, block_if_queue_full=True)
    results: list[object] = []
    for i in range(50):
        producer.send_async(b"%d" % i, lambda result, msg_id: results.append(result))
    producer.flush()
    assert results == [magnetar.Result.Ok] * 50
    assert [s.payload for s in broker.wait_for_sends(50)] == [b"%d" % i for i in range(50)]
