"""The official `pulsar-client` against a real Magnetar broker on port 0.

Producing, Exclusive and Shared subscriptions, acks, redelivery and restarts,
with the unmodified C++-based client (short timeouts, closed in `finally`).
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pulsar
import pytest

from tests.support.brokers import BrokerFactory, BrokerThread
from tests.support.draining import receive_until_idle
from tests.support.failover_ring import ring_owner
from tests.support.official import official_client

pytestmark = pytest.mark.official

Shared = pulsar.ConsumerType.Shared
Earliest = pulsar.InitialPosition.Earliest
RECEIVE_MS = 5000


def _topic(prefix: str = "t") -> str:
    return f"persistent://public/default/{prefix}-{uuid.uuid4().hex[:10]}"


def test_produce_consume_one_message(broker: BrokerThread) -> None:
    """SEM-9: CONNECT, lookup, PRODUCER, SEND -> receipt; SUBSCRIBE, FLOW, MESSAGE, ACK."""
    topic = _topic()
    with official_client(broker.url) as client:
        consumer = client.subscribe(topic, "sub")
        producer = client.create_producer(topic)
        msg_id = producer.send(b"hello", properties={"k": "v"}, partition_key="key-1")
        msg = consumer.receive(timeout_millis=RECEIVE_MS)
        assert msg.data() == b"hello"
        assert msg.properties() == {"k": "v"}
        assert msg.partition_key() == "key-1"
        assert msg.redelivery_count() == 0
        assert msg.message_id() == msg_id
        assert msg_id.entry_id() == 0  # WIRE 8: entry ids start at 0 on a new topic
        assert msg.topic_name() == topic
        consumer.acknowledge(msg)
        assert producer.producer_name()  # broker-assigned, non-empty


@pytest.mark.parametrize("batching", [False, True], ids=["unbatched", "batched"])
def test_many_messages_round_trip(broker: BrokerThread, batching: bool) -> None:
    """Keys, properties and payloads come back equal and in order (Exclusive)."""
    topic = _topic()
    count = 500
    sent = [
        (f"payload-{i}".encode() * (1 + i % 5), {"i": str(i), "even": str(i % 2 == 0)}, f"k{i % 7}")
        for i in range(count)
    ]
    with official_client(broker.url) as client:
        consumer = client.subscribe(topic, "sub", initial_position=Earliest)
        producer = client.create_producer(
            topic, batching_enabled=batching, batching_max_publish_delay_ms=5
        )
        results: list[Any] = []
        for data, props, key in sent:
            producer.send_async(
                data, lambda res, _mid: results.append(res), properties=props, partition_key=key
            )
        producer.flush()
        assert results == [pulsar.Result.Ok] * count
        got = []
        for _ in range(count):
            msg = consumer.receive(timeout_millis=RECEIVE_MS)
            got.append((msg.data(), msg.properties(), msg.partition_key()))
            consumer.acknowledge(msg)
        assert got == sent
        if batching:
            # Fewer entries than messages: the broker stored batches whole.
            assert msg.message_id().entry_id() < count - 1
        assert receive_until_idle(consumer, idle_ms=200) == []


def test_exclusive_refuses_second_consumer(broker: BrokerThread) -> None:
    """SEM-4.1: a second consumer on an Exclusive subscription gets ConsumerBusy."""
    topic = _topic()
    with official_client(broker.url) as client:
        first = client.subscribe(topic, "sub")
        with pytest.raises(pulsar.ConsumerBusy):
            client.subscribe(topic, "sub")
        # A Shared consumer on the same (Exclusive) subscription is refused too.
        with pytest.raises(pulsar.ConsumerBusy):
            client.subscribe(topic, "sub", consumer_type=Shared)
        first.close()
        again = client.subscribe(topic, "sub")
        again.close()


def test_shared_three_consumers_each_message_once(broker: BrokerThread) -> None:
    """SEM-4.3: on Shared every message goes to exactly one consumer."""
    topic = _topic()
    count = 300
    with official_client(broker.url) as client:
        consumers = [
            client.subscribe(
                topic, "shared", consumer_type=Shared, receiver_queue_size=10, consumer_name=f"c{i}"
            )
            for i in range(3)
        ]
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(count):
            producer.send_async(str(i).encode(), None)
        producer.flush()
        seen: dict[int, list[bytes]] = {i: [] for i in range(3)}
        deadline = time.monotonic() + 20
        while sum(len(v) for v in seen.values()) < count and time.monotonic() < deadline:
            for i, consumer in enumerate(consumers):
                try:
                    msg = consumer.receive(timeout_millis=50)
                except pulsar.Timeout:
                    continue
                seen[i].append(msg.data())
                consumer.acknowledge(msg)
        everything = [d for v in seen.values() for d in v]
        assert sorted(everything, key=int) == [str(i).encode() for i in range(count)]
        assert all(seen[i] for i in range(3)), "each consumer got a share"
        for consumer in consumers:
            assert receive_until_idle(consumer, idle_ms=200) == []


def test_closed_consumer_unacked_go_to_others(broker: BrokerThread) -> None:
    """SEM-3.8: a consumer closed with unacked messages hands them to the others,
    with redelivery count 1."""
    topic = _topic()
    with official_client(broker.url) as client:
        producer = client.create_producer(topic, batching_enabled=False)
        leaver = client.subscribe(topic, "s", consumer_type=Shared, receiver_queue_size=5)
        for i in range(5):
            producer.send(f"m{i}".encode())
        received = [leaver.receive(timeout_millis=RECEIVE_MS) for _ in range(5)]
        assert [m.redelivery_count() for m in received] == [0] * 5
        stayer = client.subscribe(topic, "s", consumer_type=Shared)
        leaver.close()  # nothing acked
        redelivered = receive_until_idle(stayer, idle_ms=500)
        assert sorted(m.data() for m in redelivered) == [f"m{i}".encode() for i in range(5)]
        assert [m.redelivery_count() for m in redelivered] == [1] * 5


def test_negative_ack_redelivers(broker: BrokerThread) -> None:
    """SEM-3.5, SEM-3.7: a nacked message comes back after the delay, count + 1."""
    topic = _topic()
    with official_client(broker.url) as client:
        consumer = client.subscribe(
            topic, "s", consumer_type=Shared, negative_ack_redelivery_delay_ms=100
        )
        producer = client.create_producer(topic)
        producer.send(b"nack-me")
        first = consumer.receive(timeout_millis=RECEIVE_MS)
        consumer.negative_acknowledge(first)
        second = consumer.receive(timeout_millis=RECEIVE_MS)
        assert second.data() == b"nack-me"
        assert second.message_id() == first.message_id()
        assert second.redelivery_count() == 1
        consumer.acknowledge(second)
        assert receive_until_idle(consumer, idle_ms=300) == []


def test_negative_ack_on_exclusive_redelivers(broker: BrokerThread) -> None:
    """SEM-3.7: on Exclusive the broker rewinds to the first unacked message."""
    topic = _topic()
    with official_client(broker.url) as client:
        consumer = client.subscribe(topic, "s", negative_ack_redelivery_delay_ms=100)
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(3):
            producer.send(f"m{i}".encode())
        msgs = [consumer.receive(timeout_millis=RECEIVE_MS) for _ in range(3)]
        consumer.acknowledge(msgs[0])
        consumer.negative_acknowledge(msgs[1])
        consumer.acknowledge(msgs[2])
        again = consumer.receive(timeout_millis=RECEIVE_MS)
        assert again.data() == b"m1"
        assert again.redelivery_count() >= 1
        consumer.acknowledge(again)


@pytest.mark.slow
def test_ack_timeout_redelivers(broker: BrokerThread) -> None:
    """SEM-3.6: received but unacked messages come back after the ack timeout.

    The official Python client refuses ack timeouts under 10 s, hence slow."""
    topic = _topic()
    with official_client(broker.url) as client:
        consumer = client.subscribe(
            topic, "s", consumer_type=Shared, unacked_messages_timeout_ms=10_000
        )
        producer = client.create_producer(topic)
        producer.send(b"ack-me-late")
        first = consumer.receive(timeout_millis=RECEIVE_MS)
        started = time.monotonic()
        second = consumer.receive(timeout_millis=15_000)
        assert time.monotonic() - started >= 5
        assert second.data() == b"ack-me-late"
        assert second.message_id() == first.message_id()
        assert second.redelivery_count() == 1
        consumer.acknowledge(second)


def test_cumulative_ack_on_exclusive(broker: BrokerThread) -> None:
    """SEM-3.2: a cumulative ack acks everything up to the message."""
    topic = _topic()
    with official_client(broker.url) as client:
        producer = client.create_producer(topic, batching_enabled=False)
        consumer = client.subscribe(topic, "s", initial_position=Earliest)
        for i in range(10):
            producer.send(f"m{i}".encode())
        msgs = [consumer.receive(timeout_millis=RECEIVE_MS) for _ in range(10)]
        consumer.acknowledge_cumulative(msgs[5])
        consumer.close()
        # Reconnecting: only what follows the cumulative ack comes back.
        consumer = client.subscribe(topic, "s")
        rest = receive_until_idle(consumer, idle_ms=500)
        assert [m.data() for m in rest] == [f"m{i}".encode() for i in range(6, 10)]
        assert [m.redelivery_count() for m in rest] == [1] * 4


def test_cumulative_ack_refused_on_shared(broker: BrokerThread) -> None:
    """SEM-3.2: Shared subscriptions do not take cumulative acks."""
    topic = _topic()
    with official_client(broker.url) as client:
        consumer = client.subscribe(topic, "s", consumer_type=Shared)
        producer = client.create_producer(topic)
        producer.send(b"x")
        msg = consumer.receive(timeout_millis=RECEIVE_MS)
        with pytest.raises(pulsar.CumulativeAcknowledgementNotAllowedError):
            consumer.acknowledge_cumulative(msg)


def test_restart_between_produce_and_consume(broker: BrokerThread) -> None:
    """SEM-3.9, SEM-5.2: stored messages and the subscription survive a restart."""
    topic = _topic()
    with official_client(broker.url) as client:
        client.subscribe(topic, "durable", initial_position=Earliest).close()
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(20):
            producer.send(f"m{i}".encode())
    broker.restart()
    with official_client(broker.url) as client:
        consumer = client.subscribe(topic, "durable")
        got = receive_until_idle(consumer, idle_ms=500)
        assert [m.data() for m in got] == [f"m{i}".encode() for i in range(20)]


def test_restart_between_ack_and_reconnect(broker: BrokerThread) -> None:
    """SEM-3.9: acked messages are never delivered again after a broker restart;
    unacked ones are."""
    topic = _topic()
    with official_client(broker.url) as client:
        producer = client.create_producer(topic, batching_enabled=False)
        consumer = client.subscribe(
            topic, "durable", consumer_type=Shared, initial_position=Earliest
        )
        for i in range(10):
            producer.send(f"m{i}".encode())
        msgs = [consumer.receive(timeout_millis=RECEIVE_MS) for _ in range(10)]
        acked = [m for m in msgs if int(m.data()[1:]) % 3 != 0]
        for msg in acked:
            consumer.acknowledge(msg)
        consumer.close()  # flushes the grouped acks
    broker.restart()
    with official_client(broker.url) as client:
        consumer = client.subscribe(topic, "durable", consumer_type=Shared)
        again = receive_until_idle(consumer, idle_ms=500)
        assert sorted(m.data() for m in again) == [b"m0", b"m3", b"m6", b"m9"]


def test_batched_entries_ack_and_restart(broker: BrokerThread) -> None:
    """SEM-2.2, SEM-3.9: batches are counted by message and acked whole."""
    topic = _topic()
    with official_client(broker.url) as client:
        producer = client.create_producer(
            topic, batching_enabled=True, batching_max_messages=10, batching_max_publish_delay_ms=50
        )
        consumer = client.subscribe(topic, "b", initial_position=Earliest, receiver_queue_size=20)
        for i in range(50):
            producer.send_async(f"m{i}".encode(), None)
        producer.flush()
        got = [consumer.receive(timeout_millis=RECEIVE_MS) for _ in range(50)]
        assert [m.data() for m in got] == [f"m{i}".encode() for i in range(50)]
        for msg in got[:30]:
            consumer.acknowledge(msg)
        consumer.close()
    broker.restart()
    with official_client(broker.url) as client:
        consumer = client.subscribe(topic, "b")
        rest = receive_until_idle(consumer, idle_ms=500)
        # Whole batches of 10 were acked; nothing acked comes back.
        assert [m.data() for m in rest] == [f"m{i}".encode() for i in range(30, 50)]


def test_auto_topic_creation_off(broker_factory: BrokerFactory) -> None:
    """With automatic creation off, unknown topics fail fast with TopicNotFound."""
    broker = broker_factory(allow_auto_topic_creation=False)
    with official_client(broker.url, operation_timeout_seconds=5) as client:
        started = time.monotonic()
        with pytest.raises(pulsar.TopicNotFound):
            client.create_producer(_topic())
        with pytest.raises(pulsar.TopicNotFound):
            client.subscribe(_topic(), "s")
        assert time.monotonic() - started < 4, "TopicNotFound must not be retried"


def test_partitioned_topic(broker: BrokerThread) -> None:
    """PARTITIONED_METADATA from the metadata store; message ids carry the partition."""
    topic = _topic("part")
    assert broker.server is not None and broker.server.service is not None
    broker.call(broker.server.service.create_partitioned_topic(topic, 3))
    with official_client(broker.url) as client:
        consumer = client.subscribe(topic, "s", initial_position=Earliest)
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(30):
            producer.send(f"m{i}".encode(), partition_key=f"key-{i}")
        got = [consumer.receive(timeout_millis=RECEIVE_MS) for _ in range(30)]
        assert sorted(m.data() for m in got) == sorted(f"m{i}".encode() for i in range(30))
        partitions = {m.message_id().partition() for m in got}
        assert partitions <= {0, 1, 2} and len(partitions) > 1
        assert {m.topic_name() for m in got} <= {f"{topic}-partition-{i}" for i in range(3)}
        for msg in got:
            consumer.acknowledge(msg)


def test_last_message_id_and_reader(broker: BrokerThread) -> None:
    """WIRE 10: GET_LAST_MESSAGE_ID lets a reader find the end of the topic."""
    topic = _topic()
    with official_client(broker.url) as client:
        # An empty topic's last message id is (-1, -1), as Pulsar answers it
        # (the C++ suite's ConsumerTest.testGetLastMessageId).
        empty = client.subscribe(topic, "first").get_last_message_id()
        assert (empty.ledger_id(), empty.entry_id()) == (-1, -1)
        reader_on_empty = client.create_reader(topic, pulsar.MessageId.earliest)
        assert not reader_on_empty.has_message_available()
        producer = client.create_producer(topic, batching_enabled=False)
        ids = [producer.send(f"m{i}".encode()) for i in range(3)]
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        read = []
        while reader.has_message_available():
            read.append(reader.read_next(timeout_millis=RECEIVE_MS).data())
        assert read == [b"m0", b"m1", b"m2"]
        consumer = client.subscribe(topic, "s")
        assert consumer.get_last_message_id() == ids[-1]


def test_producer_names_unique_per_topic(broker: BrokerThread) -> None:
    """Broker-assigned names are unique; a taken name gets ProducerBusy (fatal)."""
    topic = _topic()
    with official_client(broker.url) as client:
        first = client.create_producer(topic)
        second = client.create_producer(topic)
        assert first.producer_name() != second.producer_name()
        assert first.last_sequence_id() == -1  # a new producer name
        named = client.create_producer(topic, producer_name="only-one")
        with pytest.raises(pulsar.ProducerBusy):
            client.create_producer(topic, producer_name="only-one")
        named.close()
        client.create_producer(topic, producer_name="only-one").close()


def test_exclusive_producer_access_mode(broker: BrokerThread) -> None:
    """WIRE 7: a second Exclusive producer is fenced; a Shared one next to it
    is ProducerBusy, as Pulsar answers it (the C++ suite's
    ProducerTest.testExclusiveProducer)."""
    topic = _topic()
    Exclusive = pulsar.ProducerAccessMode.Exclusive
    with official_client(broker.url) as client:
        owner = client.create_producer(topic, access_mode=Exclusive)
        with pytest.raises(pulsar.ProducerFenced):
            client.create_producer(topic, access_mode=Exclusive)
        with pytest.raises(pulsar.ProducerBusy):
            client.create_producer(topic)
        owner.send(b"from the owner")
        owner.close()
        client.create_producer(topic, access_mode=Exclusive).close()


def test_unsubscribe_forgets_the_cursor(broker: BrokerThread) -> None:
    """UNSUBSCRIBE deletes the subscription: a new one starts from its initial position."""
    topic = _topic()
    with official_client(broker.url) as client:
        producer = client.create_producer(topic)
        consumer = client.subscribe(topic, "gone", initial_position=Earliest)
        producer.send(b"before")
        assert consumer.receive(timeout_millis=RECEIVE_MS).data() == b"before"
        consumer.unsubscribe()
        producer.send(b"while unsubscribed")
        consumer = client.subscribe(topic, "gone")  # Latest: a brand-new cursor
        producer.send(b"after")
        assert [m.data() for m in receive_until_idle(consumer, idle_ms=300)] == [b"after"]


def test_seek_to_message_id(broker: BrokerThread) -> None:
    """WIRE 12: after SEEK the broker delivers from the entry sought and forgets
    later acks; the official client drops that entry itself unless inclusive."""
    topic = _topic()
    with official_client(broker.url) as client:
        producer = client.create_producer(topic, batching_enabled=False)
        ids = [producer.send(f"m{i}".encode()) for i in range(5)]
        for inclusive, expected in [(True, [b"m2", b"m3", b"m4"]), (False, [b"m3", b"m4"])]:
            consumer = client.subscribe(
                topic,
                f"s-{inclusive}",
                initial_position=Earliest,
                start_message_id_inclusive=inclusive,
            )
            assert len(receive_until_idle(consumer, idle_ms=300)) == 5
            consumer.seek(ids[2])
            again = receive_until_idle(consumer, idle_ms=800)
            assert [m.data() for m in again] == expected
            consumer.close()


@pytest.mark.parametrize("consumer_type", [pulsar.ConsumerType.Exclusive, Shared])
def test_batches_larger_than_half_the_queue_do_not_stall(
    broker: BrokerThread, consumer_type: Any
) -> None:
    """SEM-2.2, SEM-2.3: batches of 8 with a receiver queue of 10 all arrive."""
    topic = _topic()
    with official_client(broker.url) as client:
        consumer = client.subscribe(topic, "s", consumer_type=consumer_type, receiver_queue_size=10)
        producer = client.create_producer(
            topic, batching_enabled=True, batching_max_messages=8, batching_max_publish_delay_ms=50
        )
        for i in range(96):
            producer.send_async(f"m{i}".encode(), None)
        producer.flush()
        got = [consumer.receive(timeout_millis=RECEIVE_MS).data() for _ in range(96)]
        assert sorted(got) == sorted(f"m{i}".encode() for i in range(96))


def test_failover_standby_takes_over(broker: BrokerThread) -> None:
    """SEM-4.2: the owner of the topic's point on the ring is active, whoever
    subscribed first; when it leaves the standby gets every unacked message."""
    topic = _topic()
    Failover = pulsar.ConsumerType.Failover
    winner = ring_owner(topic, ["a", "b"])
    with official_client(broker.url) as client:
        producer = client.create_producer(topic, batching_enabled=False)
        first_in = client.subscribe(topic, "fo", consumer_type=Failover, consumer_name="a")
        second_in = client.subscribe(topic, "fo", consumer_type=Failover, consumer_name="b")
        active, standby = (first_in, second_in) if winner == "a" else (second_in, first_in)
        for i in range(6):
            producer.send(f"m{i}".encode())
        first = [active.receive(timeout_millis=RECEIVE_MS) for _ in range(6)]
        active.acknowledge_cumulative(first[2])
        with pytest.raises(pulsar.Timeout):
            standby.receive(timeout_millis=200)
        active.close()
        rest = receive_until_idle(standby, idle_ms=500)
        assert [m.data() for m in rest] == [b"m3", b"m4", b"m5"]


@pytest.mark.parametrize("inclusive", [False, True], ids=["exclusive-start", "inclusive-start"])
def test_reader_from_message_id(broker: BrokerThread, inclusive: bool) -> None:
    """WIRE 11, SEM-5.6: a reader starts at the given id (the client drops the
    start itself unless inclusive); batches are entered mid-way."""
    topic = _topic()
    with official_client(broker.url) as client:
        producer = client.create_producer(topic, batching_enabled=False)
        ids = [producer.send(f"m{i}".encode()) for i in range(4)]
        batcher = client.create_producer(
            topic, batching_enabled=True, batching_max_publish_delay_ms=20
        )
        for i in range(4, 8):
            batcher.send_async(f"m{i}".encode(), None)
        batcher.flush()
        reader = client.create_reader(topic, ids[1], start_message_id_inclusive=inclusive)
        got = []
        while reader.has_message_available():
            got.append(reader.read_next(timeout_millis=RECEIVE_MS))
        first = 1 if inclusive else 2
        assert [m.data() for m in got] == [f"m{i}".encode() for i in range(first, 8)]
        # Starting inside the batch entry: only the messages after the id.
        batch_id = got[-2].message_id()
        reader.close()
        reader = client.create_reader(topic, batch_id, start_message_id_inclusive=inclusive)
        tail = []
        while reader.has_message_available():
            tail.append(reader.read_next(timeout_millis=RECEIVE_MS).data())
        assert tail == ([b"m6", b"m7"] if inclusive else [b"m7"])


def test_reader_at_latest_sees_only_new_messages(broker: BrokerThread) -> None:
    """SEM-5.6: a reader at latest starts after the last stored message."""
    topic = _topic()
    with official_client(broker.url) as client:
        producer = client.create_producer(topic)
        producer.send(b"old")
        reader = client.create_reader(topic, pulsar.MessageId.latest)
        assert not reader.has_message_available()
        producer.send(b"new")
        assert reader.read_next(timeout_millis=RECEIVE_MS).data() == b"new"


def test_seek_to_publish_time(broker: BrokerThread) -> None:
    """WIRE 12: SEEK by time goes to the first entry published at or after it."""
    topic = _topic()
    with official_client(broker.url) as client:
        producer = client.create_producer(topic, batching_enabled=False)
        consumer = client.subscribe(topic, "s", initial_position=Earliest)
        for i in range(3):
            producer.send(f"old{i}".encode())
        time.sleep(0.05)
        boundary = int(time.time() * 1000)
        time.sleep(0.05)
        for i in range(3):
            producer.send(f"new{i}".encode())
        assert len(receive_until_idle(consumer, idle_ms=300)) == 6
        consumer.seek(boundary)
        again = receive_until_idle(consumer, idle_ms=800)
        assert [m.data() for m in again] == [b"new0", b"new1", b"new2"]


def test_exclusive_with_fencing_takes_over(broker: BrokerThread) -> None:
    """WIRE 7: ExclusiveWithFencing closes the current producers and takes over;
    the fenced producer cannot publish again."""
    topic = _topic()
    Mode = pulsar.ProducerAccessMode
    with official_client(broker.url, operation_timeout_seconds=3) as client:
        old = client.create_producer(topic, access_mode=Mode.Exclusive, send_timeout_millis=2000)
        old.send(b"before")
        new = client.create_producer(topic, access_mode=Mode.ExclusiveWithFencing)
        new.send(b"after")
        with pytest.raises(pulsar.ProducerFenced):
            old.send(b"fenced")
        consumer = client.subscribe(topic, "s", initial_position=Earliest)
        assert [m.data() for m in receive_until_idle(consumer, idle_ms=300)] == [
            b"before",
            b"after",
        ]


def test_wait_for_exclusive_is_queued_until_the_holder_leaves(broker: BrokerThread) -> None:
    """WIRE 6: a WaitForExclusive producer gets producer_ready = false and stays
    pending while an exclusive producer holds the topic; it takes over when that
    producer closes, and its messages follow the holder's."""
    topic = _topic()
    Mode = pulsar.ProducerAccessMode
    with official_client(broker.url, operation_timeout_seconds=10) as client:
        holder = client.create_producer(topic, access_mode=Mode.Exclusive)
        holder.send(b"first")
        created: list[Any] = []
        waiter = threading.Thread(
            target=lambda: created.append(
                client.create_producer(topic, access_mode=Mode.WaitForExclusive)
            )
        )
        waiter.start()
        waiter.join(0.5)
        assert waiter.is_alive() and not created  # queued, not refused
        holder.send(b"still mine")
        holder.close()
        waiter.join(5)
        assert created, "the queued producer did not take over"
        created[0].send(b"second")
        consumer = client.subscribe(topic, "s", initial_position=Earliest)
        assert [m.data() for m in receive_until_idle(consumer, idle_ms=300)] == [
            b"first",
            b"still mine",
            b"second",
        ]
