"""Consumer scenarios, each run through the official client (`import pulsar`) and
through ours (`magnetar.client`), against our broker and pulsar-lite (issue 12's
conformance set; the DLQ, retry and priority scenarios are in
test_scenarios_dead_letter.py, multi-topic and readers in their own files).

Every scenario uses only the API the two modules share; where they
legitimately differ the docstring says why and each one's own behaviour is
asserted. Producers are plain (unbatched) unless the scenario is about
batches or chunks, where ours produces for both (the official Python client
cannot set a chunk size).
"""

from __future__ import annotations

import queue
import time
from types import ModuleType
from typing import Any

import pytest

import magnetar.client as magnetar_client
from tests.interop.conftest import (
    BrokerUnderTest,
    is_official,
    open_client,
    require_api,
)
from tests.support.failover_ring import ring_owner
from tests.support.polling import eventually

pytestmark = [pytest.mark.lite, pytest.mark.official]

QUIET_MS = 300  # how long "nothing more comes" is watched


def _send(client: Any, topic: str, count: int, prefix: str = "m") -> list[Any]:
    producer = client.create_producer(topic, batching_enabled=False)
    return [producer.send(f"{prefix}{i}".encode()) for i in range(count)]


def _sub(client: Any, api: ModuleType, topic: str, sub: str = "sub", **options: Any) -> Any:
    options.setdefault("initial_position", api.InitialPosition.Earliest)
    return client.subscribe(topic, sub, **options)


def _quiet(
    consumer: Any, api: ModuleType, at_least: int = 0, timeout_ms: int = QUIET_MS
) -> list[bytes]:
    """The next `at_least` messages (each given 10 s, so a slow machine does not
    cut them off), then whatever arrives until nothing has for `timeout_ms`."""
    out = [consumer.receive(timeout_millis=10_000).data() for _ in range(at_least)]
    while True:
        try:
            out.append(consumer.receive(timeout_millis=timeout_ms).data())
        except api.Timeout:
            return out


def test_receive_with_timeout(broker: BrokerUnderTest, api: ModuleType) -> None:
    """SEM-2.1 / 2.3: receive(timeout) raises Timeout when nothing comes in time;
    receive() without one waits for the next message."""
    topic = broker.topic("recv")
    with open_client(api, broker.url) as client:
        consumer = _sub(client, api, topic)
        with pytest.raises(api.Timeout):
            consumer.receive(timeout_millis=200)
        _send(client, topic, 2)
        assert consumer.receive().data() == b"m0"
        assert consumer.receive(timeout_millis=5000).data() == b"m1"
        with pytest.raises(api.Timeout):
            consumer.receive(timeout_millis=200)


def test_message_listener_pause_and_resume(broker: BrokerUnderTest, api: ModuleType) -> None:
    """SEM-1 message_listener: the listener gets every message on the listener
    thread (receive is refused); pause holds new messages until resume."""
    topic = broker.topic("listener")
    seen: queue.Queue[bytes] = queue.Queue()

    def listener(consumer: Any, msg: Any) -> None:
        seen.put(msg.data())
        consumer.acknowledge(msg)

    with open_client(api, broker.url) as client:
        consumer = _sub(client, api, topic, message_listener=listener)
        with pytest.raises(api.InvalidConfiguration):
            consumer.receive(timeout_millis=10)
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(b"m0")
        producer.send(b"m1")
        assert [seen.get(timeout=5), seen.get(timeout=5)] == [b"m0", b"m1"]
        consumer.pause_message_listener()
        producer.send(b"paused")
        with pytest.raises(queue.Empty):
            seen.get(timeout=QUIET_MS / 1000)
        consumer.resume_message_listener()
        assert seen.get(timeout=5) == b"paused"


def test_batch_receive_policy(broker: BrokerUnderTest, api: ModuleType) -> None:
    """SEM-1 batch_receive_policy: batch_receive returns at the count limit, at
    the bytes limit, or with what came by the timeout. Neither client returns
    more than max_num_bytes (as Java's MessagesImpl.canAdd), one message at
    least."""
    topic = broker.topic("batchrecv")
    with open_client(api, broker.url) as client:
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(7):
            producer.send(b"%d" % i + b"." * 99)  # 100 bytes each
        policy = api.ConsumerBatchReceivePolicy
        by_count = _sub(client, api, topic, "count", batch_receive_policy=policy(5, -1, 1000))
        first = by_count.batch_receive()
        assert [m.data()[:1] for m in first] == [b"0", b"1", b"2", b"3", b"4"]
        rest: list[Any] = []
        while len(rest) < 2:  # fewer than the count: the timeout returns them
            rest += by_count.batch_receive()
        assert [m.data()[:1] for m in rest] == [b"5", b"6"]
        by_count.acknowledge_cumulative(rest[-1])

        by_bytes = _sub(client, api, topic, "bytes", batch_receive_policy=policy(-1, 250, 1000))
        sizes = [len(m.data()) for m in by_bytes.batch_receive()]
        assert sizes == [100, 100]

        by_time = _sub(client, api, topic, "time", batch_receive_policy=policy(100, -1, 300))
        got: list[Any] = []
        while len(got) < 7:
            got += by_time.batch_receive()
        assert [m.data()[:1] for m in got] == [b"%d" % i for i in range(7)]


def test_acks_reach_the_broker_within_the_group_time(
    broker: BrokerUnderTest, api: ModuleType
) -> None:
    """SEM-3.4: grouped acks are flushed every ack_group_time (100 ms by default,
    in both clients) without a close: the broker's backlog drains to 0 while
    the consumer stays open."""
    broker.require("admin_stats")
    topic = broker.topic("acktime")
    with open_client(api, broker.url) as client:
        _send(client, topic, 4)
        consumer = _sub(client, api, topic)
        assert broker.backlog(topic, "sub") == 4
        for _ in range(4):
            consumer.acknowledge(consumer.receive(timeout_millis=5000))
        eventually("the acks stored", lambda: broker.backlog(topic, "sub") == 0, timeout=5)


def test_grouped_acks_are_flushed_on_close(broker: BrokerUnderTest, api: ModuleType) -> None:
    """SEM-3.4: acks still grouped when the consumer closes reach the broker
    (ours is given a 60 s ack_group_time, so only the close can send them; the
    official client has no such keyword and closes within its 100 ms)."""
    topic = broker.topic("ackclose")
    grouping: dict[str, Any] = {} if is_official(api) else {"ack_group_time_ms": 60_000}
    with open_client(api, broker.url) as client:
        _send(client, topic, 6)
        consumer = _sub(client, api, topic, **grouping)
        for i in range(6):
            msg = consumer.receive(timeout_millis=5000)
            if i % 2 == 0:
                consumer.acknowledge(msg)
        consumer.close()
        again = _sub(client, api, topic)
        assert sorted(_quiet(again, api, 3)) == [b"m1", b"m3", b"m5"]


def test_individual_and_cumulative_acks(broker: BrokerUnderTest, api: ModuleType) -> None:
    """SEM-3.1 / 3.2: an individual ack marks one message, a cumulative ack
    everything up to it; only the rest comes again after a resubscription."""
    topic = broker.topic("acks")
    with open_client(api, broker.url) as client:
        ids = _send(client, topic, 6)
        consumer = _sub(client, api, topic)
        received = [consumer.receive(timeout_millis=5000) for _ in ids]
        consumer.acknowledge(received[4])
        consumer.acknowledge_cumulative(received[2].message_id())
        consumer.close()
        assert _quiet(_sub(client, api, topic), api, 2) == [b"m3", b"m5"]


@pytest.mark.parametrize("kind", ["Shared", "KeyShared"])
def test_cumulative_ack_refused_on_shared_types(
    broker: BrokerUnderTest, api: ModuleType, kind: str
) -> None:
    """SEM-3.2, SEM-4.3, SEM-4.4.5: cumulative ack on Shared / Key_Shared is refused
    client-side with CumulativeAcknowledgementNotAllowedError; an individual ack
    of the same message still works."""
    topic = broker.topic("cumul")
    with open_client(api, broker.url) as client:
        _send(client, topic, 2)
        consumer = _sub(client, api, topic, consumer_type=getattr(api.ConsumerType, kind))
        msg = consumer.receive(timeout_millis=5000)
        with pytest.raises(api.CumulativeAcknowledgementNotAllowedError):
            consumer.acknowledge_cumulative(msg)
        consumer.acknowledge(msg)
        consumer.acknowledge(consumer.receive(timeout_millis=5000))
        consumer.close()
        assert _quiet(_sub(client, api, topic, consumer_type=api.ConsumerType.Shared), api) == []


def test_negative_ack_redelivers_after_its_delay(broker: BrokerUnderTest, api: ModuleType) -> None:
    """SEM-3.5: a nacked message comes back once, not before
    negative_ack_redelivery_delay, with redelivery_count 1 (SEM-3.8)."""
    topic = broker.topic("nack")
    delay_ms = 300
    with open_client(api, broker.url) as client:
        _send(client, topic, 3)
        consumer = _sub(
            client,
            api,
            topic,
            consumer_type=api.ConsumerType.Shared,
            negative_ack_redelivery_delay_ms=delay_ms,
        )
        first = [consumer.receive(timeout_millis=5000) for _ in range(3)]
        nacked_at = time.monotonic()
        consumer.negative_acknowledge(first[1])
        consumer.acknowledge(first[0])
        consumer.acknowledge(first[2])
        again = consumer.receive(timeout_millis=5000)
        assert time.monotonic() - nacked_at >= delay_ms / 1000 * 0.9  # the delay is a minimum
        assert again.data() == b"m1" and again.redelivery_count() == 1
        consumer.acknowledge(again)
        assert _quiet(consumer, api, timeout_ms=2 * delay_ms) == []


def test_ack_timeout_redelivers(broker: BrokerUnderTest, api: ModuleType) -> None:
    """SEM-3.6: a received message not acked within the ack timeout comes again
    (ours: 1 s, the SEM-1 minimum). The official client refuses an ack timeout
    under 10 s; its ack-timeout redelivery is asserted in the slower
    test_dead_letter_after_ack_timeouts, where the message comes back once
    before it is dead-lettered."""
    if is_official(api):
        pytest.skip("official client: covered by test_dead_letter_after_ack_timeouts")
    topic = broker.topic("acktimeout")
    with open_client(api, broker.url) as client:
        _send(client, topic, 2)
        consumer = _sub(
            client, api, topic, consumer_type=api.ConsumerType.Shared,
            unacked_messages_timeout_ms=1000,
        )  # fmt: skip
        first = consumer.receive(timeout_millis=5000)
        consumer.acknowledge(consumer.receive(timeout_millis=5000))
        again = consumer.receive(timeout_millis=10_000)
        assert again.data() == first.data() and again.redelivery_count() == 1
        consumer.acknowledge(again)


@pytest.mark.parametrize("kind", ["Shared", "KeyShared", "Exclusive", "Failover"])
def test_redelivery_per_subscription_type(
    broker: BrokerUnderTest, api: ModuleType, kind: str
) -> None:
    """SEM-3.7: one nack among unacked messages. Shared and Key_Shared name its
    id, so only it comes again; Exclusive and Failover ask for all unacked
    (the client clears its queue, the broker rewinds), so every unacked message
    comes again."""
    shared = kind in ("Shared", "KeyShared")
    if not shared:
        broker.require("redeliver_all")
    topic = broker.topic("redeliver")
    with open_client(api, broker.url) as client:
        _send(client, topic, 4)
        consumer = _sub(
            client,
            api,
            topic,
            consumer_type=getattr(api.ConsumerType, kind),
            negative_ack_redelivery_delay_ms=100,
        )
        got = [consumer.receive(timeout_millis=5000) for _ in range(4)]
        consumer.acknowledge(got[0])
        if not shared:  # the rewind goes to the first unacked message the broker knows
            eventually("a backlog of 3", lambda: broker.backlog(topic, "sub") == 3, timeout=5)
        consumer.negative_acknowledge(got[2])
        expected = [b"m2"] if shared else [b"m1", b"m2", b"m3"]
        assert sorted(_quiet(consumer, api, len(expected))) == expected


def test_batch_indexes_acked_are_skipped_on_redelivery(
    broker: BrokerUnderTest, api: ModuleType
) -> None:
    """SEM-3.3 / 8.3: a batch splits into its messages; with batch-index acks,
    a redelivered batch carries the acked indexes and only the others come
    again (after a nack, and after a resubscription)."""
    broker.require("batch_index_ack")
    topic = broker.topic("batchidx")
    with open_client(api, broker.url) as client, magnetar_client.Client(broker.url) as ours:
        producer = ours.create_producer(
            topic, batching_enabled=True, batching_max_publish_delay_ms=50
        )
        for i in range(5):
            producer.send_async(b"b%d" % i, None)
        producer.flush()
        consumer = _sub(
            client,
            api,
            topic,
            consumer_type=api.ConsumerType.Shared,
            batch_index_ack_enabled=True,
            negative_ack_redelivery_delay_ms=100,
        )
        batch = [consumer.receive(timeout_millis=5000) for _ in range(5)]
        assert [m.message_id().batch_index() for m in batch] == [0, 1, 2, 3, 4]
        assert len({(m.message_id().ledger_id(), m.message_id().entry_id()) for m in batch}) == 1
        for i in (0, 2):
            consumer.acknowledge(batch[i])
        consumer.negative_acknowledge(batch[1])
        again = consumer.receive(timeout_millis=5000)
        assert again.data() == b"b1" and again.redelivery_count() == 1
        consumer.acknowledge(again)
        consumer.close()
        assert sorted(_quiet(_sub(client, api, topic), api, 2)) == [b"b3", b"b4"]


def test_chunked_message_reassembled_and_acked_as_one(
    broker: BrokerUnderTest, api: ModuleType
) -> None:
    """SEM-8.2: chunks arrive as one message; acking it acks every chunk (a
    resubscription gets only what was not acked)."""
    topic = broker.topic("chunks")
    payload = bytes(range(256)) * 20
    with open_client(api, broker.url) as client, magnetar_client.Client(broker.url) as ours:
        producer = ours.create_producer(topic, chunking_enabled=True, chunk_max_message_size=1000)
        producer.send(payload, properties={"big": "yes"})
        producer.send(b"after")
        consumer = _sub(client, api, topic, max_pending_chunked_message=2)
        msg = consumer.receive(timeout_millis=5000)
        assert msg.data() == payload and msg.properties() == {"big": "yes"}
        consumer.acknowledge(msg)
        assert consumer.receive(timeout_millis=5000).data() == b"after"  # not acked
        consumer.close()
        assert _quiet(_sub(client, api, topic), api, 1) == [b"after"]


def test_seek_to_a_message_id_and_to_a_time(broker: BrokerUnderTest, api: ModuleType) -> None:
    """WIRE 12 (SEM-5.2 cursor reset): after a consumer's seek to a message id the
    broker delivers from that message; to a publish time, from the first message
    published at or after it; to a time past the end, nothing. Both clients
    drop the sought message itself unless the consumer has
    start_message_id_inclusive (SEM-1), as they do for readers."""
    broker.require("seek")
    topic = broker.topic("seek")
    with open_client(api, broker.url) as client:
        ids = _send(client, topic, 4)
        consumer = _sub(client, api, topic)
        received = [consumer.receive(timeout_millis=5000) for _ in ids]
        for msg in received:
            consumer.acknowledge(msg)
        consumer.seek(ids[2])
        assert _quiet(consumer, api, 1) == [b"m3"]
        when = received[1].publish_timestamp()
        consumer.seek(when)
        expected = [m.data() for m in received if m.publish_timestamp() >= when]
        assert _quiet(consumer, api, len(expected)) == expected
        consumer.seek(int(time.time() * 1000) + 60_000)
        assert _quiet(consumer, api) == []
        inclusive = _sub(client, api, topic, "inclusive", start_message_id_inclusive=True)
        inclusive.seek(ids[2])
        assert _quiet(inclusive, api, 2) == [b"m2", b"m3"]


def test_unsubscribe_removes_the_subscription(broker: BrokerUnderTest, api: ModuleType) -> None:
    """SEM-5.2: unsubscribe deletes the durable cursor: the same name subscribed
    again from Latest has no backlog left, and the old consumer is closed."""
    topic = broker.topic("unsub")
    with open_client(api, broker.url) as client:
        _send(client, topic, 3)
        consumer = _sub(client, api, topic)
        consumer.receive(timeout_millis=5000)  # not acked
        consumer.unsubscribe()
        with pytest.raises(api.AlreadyClosed):
            consumer.receive(timeout_millis=100)
        again = _sub(client, api, topic, initial_position=api.InitialPosition.Latest)
        with pytest.raises(api.Timeout):
            again.receive(timeout_millis=QUIET_MS)
        _send(client, topic, 1, "new")
        assert again.receive(timeout_millis=5000).data() == b"new0"


def test_get_last_message_id(broker: BrokerUnderTest, api: ModuleType) -> None:
    """WIRE (GET_LAST_MESSAGE_ID): a consumer asks for the topic's newest message id."""
    topic = broker.topic("lastid")
    with open_client(api, broker.url) as client:
        ids = _send(client, topic, 3)
        consumer = _sub(client, api, topic)
        last = consumer.get_last_message_id()
        assert (last.ledger_id(), last.entry_id()) == (ids[-1].ledger_id(), ids[-1].entry_id())


def test_failover_active_consumer(broker: BrokerUnderTest, api: ModuleType) -> None:
    """SEM-4.2 (non-partitioned topic): one Failover consumer is active and gets
    every message; when it leaves, the other takes over from the first unacked
    message. Our broker makes the owner of the topic's point on the consumers'
    hash ring active, whoever subscribed first; pulsar-lite keeps the first
    subscriber. Ours also reports the change through active_consumer_listener;
    the official Python client has no such listener (OFFICIAL_LACKS), so only
    the delivery is asserted for it (and on pulsar-lite, which sends no
    ACTIVE_CONSUMER_CHANGE)."""
    topic = broker.topic("failover")
    changes: queue.Queue[tuple[str, bool]] = queue.Queue()
    listened = not is_official(api) and "active_consumer_change" not in broker.lacks
    winner = ring_owner(topic, ["aaa", "bbb"]) if broker.magnetar is not None else "aaa"
    loser = "bbb" if winner == "aaa" else "aaa"
    with open_client(api, broker.url) as client:

        def failover(name: str) -> Any:
            options: dict[str, Any] = {}
            if listened:
                options["active_consumer_listener"] = lambda _c, active: changes.put((name, active))
            return _sub(
                client, api, topic, consumer_type=api.ConsumerType.Failover,
                consumer_name=name, **options,
            )  # fmt: skip

        consumers = {"aaa": failover("aaa"), "bbb": failover("bbb")}
        first, second = consumers[winner], consumers[loser]
        _send(client, topic, 3)
        got = [first.receive(timeout_millis=5000) for _ in range(3)]
        assert [m.data() for m in got] == [b"m0", b"m1", b"m2"]
        with pytest.raises(api.Timeout):
            second.receive(timeout_millis=QUIET_MS)
        first.acknowledge(got[0])
        first.acknowledge(got[1])
        first.close()
        assert second.receive(timeout_millis=5000).data() == b"m2"
        if listened:
            eventually(
                "the loser made active", lambda: (loser, True) in list(changes.queue), timeout=10
            )
            assert (loser, False) in list(changes.queue)  # it stood by first
            assert (winner, True) in list(changes.queue)


@pytest.mark.parametrize("partitioned", [False, True], ids=["topic", "partitioned"])
def test_failover_priority_beats_arrival(
    broker: BrokerUnderTest, api: ModuleType, partitioned: bool
) -> None:
    """SEM-4.2: priority beats name and arrival on every kind of topic: "aaa"
    (priority_level 1) subscribes first, "bbb" (priority_level 0) second, and
    "bbb" gets every message of every partition; "aaa" stands by."""
    broker.require("failover_priority")
    require_api(api, "priority_level")
    url, topic = (
        broker.partitioned_topic("fprio") if partitioned else (broker.url, broker.topic("fprio"))
    )
    with open_client(api, url) as client:
        kind = api.ConsumerType.Failover
        low = _sub(client, api, topic, consumer_type=kind, consumer_name="aaa", priority_level=1)
        high = _sub(client, api, topic, consumer_type=kind, consumer_name="bbb", priority_level=0)
        _send(client, topic, 6)
        assert sorted(_quiet(high, api, at_least=6)) == [f"m{i}".encode() for i in range(6)]
        assert _quiet(low, api) == []


def test_zero_queue_consumers_take_one_message_per_receive(
    broker: BrokerUnderTest, api: ModuleType
) -> None:
    """SEM-2.4: a zero-queue consumer asks for one message per receive, so two
    of them on a Shared subscription alternate instead of one prefetching all.
    The official client refuses receive with a timeout on a zero-queue consumer
    (InvalidConfiguration); ours takes one (Timeout when nothing comes)."""
    topic = broker.topic("zeroq")
    with open_client(api, broker.url) as client:
        _send(client, topic, 4)
        kind = api.ConsumerType.Shared
        one = _sub(client, api, topic, consumer_type=kind, receiver_queue_size=0)
        two = _sub(client, api, topic, consumer_type=kind, receiver_queue_size=0)
        order = []
        for consumer in (one, two, one, two):
            msg = consumer.receive()  # the official client takes no timeout here
            order.append(msg.data())
            consumer.acknowledge(msg)
        assert order == [b"m0", b"m1", b"m2", b"m3"]
        with pytest.raises(api.InvalidConfiguration if is_official(api) else api.Timeout):
            one.receive(timeout_millis=QUIET_MS)
