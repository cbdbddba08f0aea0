"""Key_Shared subscriptions (SEM-4.4) with the official `pulsar-client` against
a real broker on port 0: routing, per-key order across joins and leaves,
sticky ranges, key-based batching and a stuck consumer."""

from __future__ import annotations

import bisect
import random
import threading
import uuid
from collections import defaultdict
from typing import Any

import pulsar
import pytest

from magnetar.broker.dispatchers.selectors import ring_points
from magnetar.proto.hashes import key_shared_slot, murmur3_32
from tests.support.brokers import BrokerFactory, BrokerThread
from tests.support.draining import receive_until_idle
from tests.support.official import official_client

pytestmark = pytest.mark.official

KeyShared = pulsar.ConsumerType.KeyShared
RECEIVE_MS = 5000


def _topic() -> str:
    return f"persistent://public/default/ks-{uuid.uuid4().hex[:10]}"


def _body(key: str, index: int) -> bytes:
    return f"{key}/{index}".encode()


def _parse(msg: Any) -> tuple[str, int]:
    key, _, index = msg.data().decode().partition("/")
    return key, int(index)


def _produce(producer: Any, keys: list[str], per_key: int, start: int = 0) -> int:
    """Send `per_key` messages for every key, interleaved; returns how many."""
    for index in range(start, start + per_key):
        for key in keys:
            producer.send_async(_body(key, index), None, partition_key=key)
    producer.flush()
    return len(keys) * per_key


def _assert_key_order(received: dict[str, list[tuple[str, int]]]) -> None:
    """Each key is seen by one consumer only, its indexes strictly increasing."""
    owner: dict[str, str] = {}
    for name, messages in received.items():
        last: dict[str, int] = {}
        for key, index in messages:
            assert owner.setdefault(key, name) == name, f"key {key} at two consumers"
            assert index > last.get(key, -1), f"key {key} out of order at {name}"
            last[key] = index


def _drain_all(consumers: dict[str, Any]) -> dict[str, list[tuple[str, int]]]:
    """Drain every consumer at once (one thread each), acking."""
    received: dict[str, list[tuple[str, int]]] = {}

    def run(name: str, consumer: Any) -> None:
        received[name] = [_parse(m) for m in receive_until_idle(consumer, idle_ms=1000)]

    threads = [threading.Thread(target=run, args=item) for item in consumers.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return received


@pytest.mark.parametrize("batching", [False, True], ids=["unbatched", "key-based-batching"])
def test_many_keys_three_consumers(broker: BrokerThread, batching: bool) -> None:
    """SEM-4.4, SEM-4.4.5: 1,000 keys over 3 consumers: every message once,
    each key at exactly one consumer, per-key order kept (key-based batching
    producers: a batch goes by its key)."""
    topic = _topic()
    keys = [f"key-{i}" for i in range(1000)]
    with official_client(broker.url) as client:
        consumers = {
            name: client.subscribe(topic, "sub", consumer_type=KeyShared, consumer_name=name)
            for name in ("c1", "c2", "c3")
        }
        producer = client.create_producer(
            topic,
            batching_enabled=batching,
            batching_type=pulsar.BatchingType.KeyBased,
            batching_max_publish_delay_ms=5,
            block_if_queue_full=True,
        )
        sent = _produce(producer, keys, 3)
        received = _drain_all(consumers)
    assert sum(len(m) for m in received.values()) == sent
    assert len({m for messages in received.values() for m in messages}) == sent
    _assert_key_order(received)
    assert all(received.values()), "every consumer owns some of 1,000 keys"


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_joining_consumers_never_break_key_order(broker: BrokerThread, seed: int) -> None:
    """SEM-4.4.4: consumers join mid-stream at random points while the others
    receive and ack at random paces; per key, a message is received only after
    the previous one was received by the same consumer or acked elsewhere."""
    rng = random.Random(seed)
    topic = _topic()
    keys = [f"k{i}" for i in range(40)]
    per_key = 30
    total = len(keys) * per_key
    # One global order of events: (step, kind, consumer, key, index).
    events: list[tuple[int, str, str, str, int]] = []
    lock = threading.Lock()
    done = threading.Event()
    errors: list[BaseException] = []

    acks = [0]

    def record(kind: str, name: str, key: str, index: int) -> None:
        with lock:
            events.append((len(events), kind, name, key, index))
            if kind == "ack":
                acks[0] += 1
                if acks[0] == total:
                    done.set()

    def consume(name: str, consumer: Any, pace: random.Random) -> None:
        try:
            while not done.is_set():
                try:
                    msg = consumer.receive(timeout_millis=200)
                except pulsar.Timeout:
                    continue
                key, index = _parse(msg)
                record("recv", name, key, index)
                if pace.random() < 0.3:
                    threading.Event().wait(pace.random() * 0.005)  # "processing"
                # Recorded first: the broker cannot see the ack before the call.
                record("ack", name, key, index)
                consumer.acknowledge(msg)
        except BaseException as exc:  # surfaced by the main thread
            errors.append(exc)

    with official_client(broker.url) as client:
        threads: list[threading.Thread] = []

        def join(name: str) -> None:
            consumer = client.subscribe(
                topic, "sub", consumer_type=KeyShared, consumer_name=name, receiver_queue_size=20
            )
            record("join", name, "", 0)
            thread = threading.Thread(
                target=consume, args=(name, consumer, random.Random(rng.random())), daemon=True
            )
            threads.append(thread)
            thread.start()

        join("c1")
        join("c2")
        producer = client.create_producer(topic, batching_enabled=False, block_if_queue_full=True)
        joins_at = sorted(rng.sample(range(1, per_key - 1), 2))
        for index in range(per_key):
            if index in joins_at:
                join(f"c{len(threads) + 1}")
            for key in keys:
                producer.send_async(_body(key, index), None, partition_key=key)
            if rng.random() < 0.5:
                producer.flush()
        producer.flush()
        assert done.wait(60), "not every message was received and acked"
        for thread in threads:
            thread.join(10)
    assert not errors, errors
    received = [e for e in events if e[1] == "recv"]
    assert len(received) == total
    first_step: dict[tuple[str, int], tuple[int, str]] = {}
    acked_step: dict[tuple[str, int], int] = {}
    for step, kind, name, key, index in events:
        if kind == "recv":
            first_step[(key, index)] = (step, name)
        elif kind == "ack":
            acked_step[(key, index)] = step
    for key in keys:
        for index in range(1, per_key):
            step, name = first_step[(key, index)]
            before_step, before_name = first_step[(key, index - 1)]
            assert before_step < step, (
                f"{key}/{index} received before {key}/{index - 1}; history of {key}: "
                f"{[e for e in events if e[3] == key or e[1] == 'join']}"
            )
            if before_name != name:
                assert acked_step[(key, index - 1)] < step, (
                    f"{key}/{index} went to {name} while {key}/{index - 1} was unacked "
                    f"at {before_name}; history of {key}: "
                    f"{[e for e in events if e[3] == key or e[1] == 'join']}"
                )


def test_sticky_ranges_route_as_declared(broker: BrokerThread) -> None:
    """SEM-4.4.3: ranges [0,30000] and [30001,65535] route as declared; an
    overlapping third consumer is refused and the others go on."""
    topic = _topic()
    keys = [f"sticky-{i}" for i in range(200)]

    def sticky(*ranges: tuple[int, int]) -> Any:
        return pulsar.ConsumerKeySharedPolicy(
            key_shared_mode=pulsar.KeySharedMode.Sticky, sticky_ranges=list(ranges)
        )

    with official_client(broker.url) as client:
        low = client.subscribe(
            topic, "sub", consumer_type=KeyShared, key_shared_policy=sticky((0, 30000))
        )
        high = client.subscribe(
            topic, "sub", consumer_type=KeyShared, key_shared_policy=sticky((30001, 65535))
        )
        with pytest.raises(pulsar.ConsumerAssignError):
            client.subscribe(
                topic, "sub", consumer_type=KeyShared, key_shared_policy=sticky((29000, 31000))
            )
        producer = client.create_producer(topic, batching_enabled=False, block_if_queue_full=True)
        sent = _produce(producer, keys, 2)
        received = _drain_all({"low": low, "high": high})
    assert sum(len(m) for m in received.values()) == sent
    _assert_key_order(received)
    assert all(key_shared_slot(key) <= 30000 for key, _ in received["low"])
    assert all(key_shared_slot(key) >= 30001 for key, _ in received["high"])


def test_leaving_consumer_hands_keys_and_unacked_on_in_order(broker: BrokerThread) -> None:
    """SEM-4.4, SEM-3.8: a consumer leaves with unacked messages; its keys and
    those messages move to the others, each key in order from its first
    unacked message."""
    topic = _topic()
    keys = [f"leave-{i}" for i in range(60)]
    with official_client(broker.url) as client:
        stay = {
            name: client.subscribe(topic, "sub", consumer_type=KeyShared, consumer_name=name)
            for name in ("c1", "c2")
        }
        leaver = client.subscribe(topic, "sub", consumer_type=KeyShared, consumer_name="c3")
        producer = client.create_producer(topic, batching_enabled=False, block_if_queue_full=True)
        first = _produce(producer, keys, 5)
        before = _drain_all(stay)
        unacked = [_parse(m) for m in receive_until_idle(leaver, 500, ack=False)]  # never acked
        assert sum(len(m) for m in before.values()) + len(unacked) == first
        assert unacked, "c3 owns some of 60 keys"
        leaver.close()
        second = _produce(producer, keys, 5, start=5)
        after = _drain_all(stay)
    leaver_keys = {key for key, _ in unacked}
    moved: dict[str, list[int]] = defaultdict(list)
    for messages in after.values():
        for key, index in messages:
            if key in leaver_keys:
                moved[key].append(index)
    assert set(moved) == leaver_keys
    assert all(indexes == list(range(10)) for indexes in moved.values()), moved
    _assert_key_order({name: before[name] + after[name] for name in stay})
    assert sum(len(m) for m in after.values()) == second + len(unacked)


def test_consumer_without_permits_does_not_stall_other_keys(broker: BrokerThread) -> None:
    """SEM-4.4, SEM-2: one consumer has no permits (a queue of one message
    and nobody receives, so none after its first message); the others still
    get every message of their keys, and its own keys wait for it, in order."""
    topic = _topic()
    keys = [f"stuck-{i}" for i in range(300)]
    with official_client(broker.url) as client:
        others = {
            name: client.subscribe(topic, "sub", consumer_type=KeyShared, consumer_name=name)
            for name in ("c1", "c2")
        }
        stuck = client.subscribe(
            topic, "sub", consumer_type=KeyShared, consumer_name="c3", receiver_queue_size=1
        )
        producer = client.create_producer(topic, batching_enabled=False, block_if_queue_full=True)
        sent = _produce(producer, keys, 5)
        first = _drain_all(others)  # c3 has not received anything yet
        late = [_parse(m) for m in receive_until_idle(stuck, idle_ms=1000)]
    stuck_keys = {key for key, _ in late}
    assert stuck_keys, "c3 owns some of 300 keys"
    assert sum(len(m) for m in first.values()) + len(late) == sent
    assert not stuck_keys & {key for messages in first.values() for key, _ in messages}
    _assert_key_order({**first, "c3": late})


def test_consistent_hashing_option(broker_factory: BrokerFactory) -> None:
    """SEM-4.4.2: with the broker option, AUTO_SPLIT consumers share keys by
    the ring (100 points each by consumer name): every key at the consumer
    the ring names, in order."""
    broker = broker_factory(subscription_key_shared_use_consistent_hashing=True)
    topic = _topic()
    keys = [f"ring-{i}" for i in range(300)]
    names = ("orders-aggregator-pod-1", "orders-aggregator-pod-2", "orders-aggregator-pod-3")
    with official_client(broker.url) as client:
        consumers = {
            name: client.subscribe(topic, "sub", consumer_type=KeyShared, consumer_name=name)
            for name in names
        }
        producer = client.create_producer(topic, batching_enabled=False, block_if_queue_full=True)
        sent = _produce(producer, keys, 3)
        received = _drain_all(consumers)
    assert sum(len(m) for m in received.values()) == sent
    _assert_key_order(received)
    ring = sorted((point, name) for name in names for point in ring_points(name))
    points = [point for point, _ in ring]
    for name, messages in received.items():
        for key, _ in messages:
            i = bisect.bisect_left(points, murmur3_32(key)) % len(points)
            assert ring[i][1] == name, f"{key} went to {name}, the ring names {ring[i][1]}"


def test_non_persistent_topic_routes_by_key(broker: BrokerThread) -> None:
    """SEM-4.4 on a non-persistent topic: each key at one consumer, in order
    (within the receiver queues nothing is dropped)."""
    topic = f"non-persistent://public/default/ks-{uuid.uuid4().hex[:10]}"
    keys = [f"np-{i}" for i in range(200)]
    with official_client(broker.url) as client:
        consumers = {
            name: client.subscribe(topic, "sub", consumer_type=KeyShared, consumer_name=name)
            for name in ("c1", "c2", "c3")
        }
        producer = client.create_producer(topic, batching_enabled=False, block_if_queue_full=True)
        sent = _produce(producer, keys, 2)
        received = _drain_all(consumers)
    assert sum(len(m) for m in received.values()) == sent
    _assert_key_order(received)
    assert all(received.values())
