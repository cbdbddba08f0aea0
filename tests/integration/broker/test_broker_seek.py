"""Seek on consumers and readers through the official client (issue 9,
WIRE 11-12): by message id (batched or not, and user-built ids without a
batch index), by publish time, and readers that resume where the seek put
their non-durable cursor."""

from __future__ import annotations

import uuid

import pulsar
from pulsar import MessageId

from tests.support.brokers import BrokerThread
from tests.support.official import official_client

COUNT = 40


def _distinct_time_index(timestamps: list[int], around: int) -> int:
    """An index whose publish time is later than its predecessor's, so a seek
    by that time has one right answer (no sleeps needed between sends)."""
    for index in range(around, len(timestamps)):
        if timestamps[index] > timestamps[index - 1]:
            return index
    raise AssertionError("every message was published in the same millisecond")


def test_consumer_and_reader_seek(broker: BrokerThread) -> None:
    topic = f"persistent://public/default/seek-{uuid.uuid4().hex[:8]}"
    with official_client(broker.url) as client:
        consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(COUNT):
            producer.send(b"hello-%d" % i)
        ids, times = [], []
        for i in range(COUNT):
            msg = consumer.receive(timeout_millis=5000)
            assert msg.data() == b"hello-%d" % i
            ids.append(msg.message_id())
            times.append(msg.publish_timestamp())
            consumer.acknowledge(msg)

        def next_data(target: pulsar.Consumer | pulsar.Reader) -> bytes:
            if isinstance(target, pulsar.Reader):
                return target.read_next(timeout_millis=5000).data()  # type: ignore[no-any-return]
            return target.receive(timeout_millis=5000).data()  # type: ignore[no-any-return]

        # Acked messages after the target come back (acks cleared by the reset).
        consumer.seek(MessageId.earliest)
        assert next_data(consumer) == b"hello-0"
        consumer.seek(ids[20])
        assert next_data(consumer) == b"hello-21"
        consumer.seek(MessageId(ledger_id=ids[25].ledger_id(), entry_id=ids[25].entry_id()))
        assert next_data(consumer) == b"hello-26"
        at = _distinct_time_index(times, 12)
        consumer.seek(times[at])
        assert next_data(consumer) == b"hello-%d" % at

        reader = client.create_reader(topic, MessageId.latest)
        assert not reader.has_message_available()
        reader.seek(MessageId.earliest)
        assert [next_data(reader), next_data(reader)] == [b"hello-0", b"hello-1"]
        reader.seek(ids[10])
        assert [next_data(reader), next_data(reader)] == [b"hello-11", b"hello-12"]
        reader.seek(MessageId(ledger_id=ids[14].ledger_id(), entry_id=ids[14].entry_id()))
        assert next_data(reader) == b"hello-15"
        at = _distinct_time_index(times, 30)
        reader.seek(times[at])
        assert [next_data(reader), next_data(reader)] == [
            b"hello-%d" % at,
            b"hello-%d" % (at + 1),
        ]
        reader.close()


def test_reader_seek_inside_a_batch(broker: BrokerThread) -> None:
    """A batched id as the seek target: the reader resumes after that message
    within the batch."""
    topic = f"persistent://public/default/seek-batch-{uuid.uuid4().hex[:8]}"
    with official_client(broker.url) as client:
        producer = client.create_producer(
            topic, batching_enabled=True, batching_max_messages=5, batching_max_publish_delay_ms=50
        )
        for i in range(10):
            producer.send_async(b"b-%d" % i, None)
        producer.flush()
        reader = client.create_reader(topic, MessageId.earliest)
        ids = [reader.read_next(timeout_millis=5000).message_id() for _ in range(10)]
        assert ids[2].batch_index() == 2
        reader.seek(ids[2])
        assert reader.read_next(timeout_millis=5000).data() == b"b-3"
