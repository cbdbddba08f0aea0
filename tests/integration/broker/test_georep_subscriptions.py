"""Replicated subscriptions between two linked brokers, clusters "a" and "b"
(issue 45.4): snapshots of both clusters' positions, the update that moves
the subscription on the other cluster, markers that no consumer sees."""

from __future__ import annotations

import contextlib
from typing import Any

import pulsar
import pytest

import magnetar.client as mclient
from magnetar.broker.replication.snapshots import Snapshot
from magnetar.broker.storage.api import Position
from tests.support.brokers import BrokerFactory, BrokerThread
from tests.support.georep import link
from tests.support.http_calls import http_call
from tests.support.official import official_client
from tests.support.polling import eventually

Pair = tuple[BrokerThread, BrokerThread]


@pytest.fixture
def fast_pair(broker_factory: BrokerFactory) -> Pair:
    """linked_pair with a snapshot every 100 ms."""
    fast = {"replicated_subscriptions_snapshot_frequency_millis": 100}
    a = broker_factory(cluster_name="a", **fast)
    b = broker_factory(cluster_name="b", **fast)
    link({"a": a, "b": b})
    return a, b


async def _snapshots(broker: BrokerThread, topic: str) -> list[Snapshot]:
    assert broker.server is not None and broker.server.service is not None
    controller = broker.server.service.replicators.replicated_subscriptions(topic)
    return [] if controller is None else list(controller.snapshots)


def _mark_delete(broker: BrokerThread, topic: str, subscription: str) -> Position | None:
    """The subscription's mark-delete position (internalStats); None while
    it does not exist."""
    path = topic.removeprefix("persistent://")
    status, stats = http_call("GET", f"{broker.http_url}/admin/v2/persistent/{path}/internalStats")
    if status != 200:
        return None
    cursor = stats["cursors"].get(subscription)
    if cursor is None:
        return None
    ledger, entry = cursor["markDeletePosition"].split(":")
    return Position(int(ledger), int(entry))


def _backlog(broker: BrokerThread, topic: str, subscription: str) -> int:
    path = topic.removeprefix("persistent://")
    status, stats = http_call("GET", f"{broker.http_url}/admin/v2/persistent/{path}/stats")
    assert status == 200, stats
    return int(stats["subscriptions"][subscription]["msgBacklog"])


def _position(msg: Any) -> Position:
    msg_id = msg.message_id()
    return Position(msg_id.ledger_id(), msg_id.entry_id())


def _drain(consumer: Any, wait_ms: int = 1500, *, ack: bool = True) -> list[str]:
    """Every message the consumer gets until it gets none for `wait_ms`."""
    got: list[str] = []
    while True:
        try:
            msg = consumer.receive(timeout_millis=wait_ms)
        except (pulsar.Timeout, mclient.Timeout):
            return got
        if ack:
            consumer.acknowledge(msg)
        got.append(msg.data().decode())


def test_subscription_follows_on_the_other_cluster(fast_pair: Pair) -> None:
    """Issue 45.4: a replicated subscription acknowledged up to message 50 on
    A moves on B (created there by the update marker) past every message a
    snapshot covered before the ack: a consumer on B gets none of 1..40 and
    every one of 51..100, each once. Markers reach no consumer on either
    side, and a subscription that is not replicated stays where it is on B."""
    a, b = fast_pair
    topic = "persistent://public/geo/replicated-sub"
    earliest = pulsar.InitialPosition.Earliest
    with official_client(a.url) as client_a, official_client(b.url) as client_b:
        other_a = client_a.subscribe(topic, "other", initial_position=earliest)
        sub_a = client_a.subscribe(
            topic, "s", initial_position=earliest, replicate_subscription_state_enabled=True
        )
        producer = client_a.create_producer(topic, batching_enabled=False)
        producer.send(b"1")
        # B's topic exists once the first message is there.
        other_b = client_b.subscribe(topic, "other", initial_position=earliest)
        first_b = other_b.receive(timeout_millis=15000)
        assert first_b.data() == b"1"
        other_b.close()  # not acknowledged: "other" on B stays at the start
        for i in range(2, 41):
            producer.send(str(i).encode())
        # A snapshot taken after message 40 reached B.
        plain_b = client_b.subscribe(topic, "plain", initial_position=earliest)
        received = [plain_b.receive(timeout_millis=15000) for _ in range(40)]
        assert received[-1].data() == b"40"
        at_40 = _position(received[-1])
        eventually(
            "a snapshot covering message 40 on B",
            lambda: any(s.remotes["b"] >= at_40 for s in a.call(_snapshots(a, topic))),
        )
        for i in range(41, 101):
            producer.send(str(i).encode())
        for i in range(1, 51):
            msg = sub_a.receive(timeout_millis=15000)
            assert msg.data() == str(i).encode()
            sub_a.acknowledge(msg)
        eventually(
            "the mark-delete of s on B past message 40",
            lambda: (found := _mark_delete(b, topic, "s")) is not None and found >= at_40,
            timeout=20,
        )
        sub_a.close()
        # On B: s resumes after what A acknowledged (and a snapshot covered).
        sub_b = client_b.subscribe(
            topic, "s", initial_position=earliest, replicate_subscription_state_enabled=True
        )
        got = _drain(sub_b)
        numbers = [int(text) for text in got]
        assert len(numbers) == len(set(numbers)), "duplicates"
        assert not [n for n in numbers if n <= 40], numbers
        assert set(range(51, 101)) <= set(numbers)
        assert set(numbers) <= set(range(41, 101))
        # Markers reach no consumer: exactly the 100 messages on both sides.
        assert _drain(other_a) == [str(i) for i in range(1, 101)]
        # ... and the dispatcher acknowledges them: no backlog stays behind.
        eventually("no backlog left on A's other", lambda: _backlog(a, topic, "other") == 0)
        other_b = client_b.subscribe(topic, "other", initial_position=earliest)
        assert _drain(other_b) == [str(i) for i in range(1, 101)]
        assert [m.data().decode() for m in received] + _drain(plain_b) == [
            str(i) for i in range(1, 101)
        ]


def _internal_stats(broker: BrokerThread, topic: str) -> dict[str, Any]:
    path = topic.removeprefix("persistent://")
    status, stats = http_call("GET", f"{broker.http_url}/admin/v2/persistent/{path}/internalStats")
    assert status == 200, (status, stats)
    assert isinstance(stats, dict)
    return stats


def _read_to_end(client: Any, topic: str) -> list[str]:
    """A reader from the earliest message while hasMessageAvailable says so
    (trailing markers must not keep it waiting)."""
    reader = client.create_reader(topic, mclient.MessageId.earliest)
    try:
        got = []
        while reader.has_message_available():
            got.append(reader.read_next(5000).data().decode())
        return got
    finally:
        reader.close()


async def _activity(broker: BrokerThread, topic: str) -> tuple[bool, int, int]:
    """Whether the topic's snapshot machinery is idle, the messages its
    replicators have yet to send, and its entries."""
    assert broker.server is not None and broker.server.service is not None
    replicators = broker.server.service.replicators
    controller = replicators.replicated_subscriptions(topic)
    assert controller is not None
    backlog = sum(r.backlog for r in replicators.of(topic).values())
    return controller.idle, backlog, controller.topic.ledger.number_of_entries


def _entries_settle(pair: Pair, topic: str) -> None:
    """No marker comes any more: on both clusters the snapshot machinery is
    idle and the replicators have sent everything, at two looks in a row
    with no entry stored between (a marker reaches the other cluster only
    through a replicator, and is acted on there before its receipt)."""
    seen: list[tuple[bool, int, int]] = []

    def quiet() -> bool:
        now = [broker.call(_activity(broker, topic)) for broker in pair]
        before, seen[:] = list(seen), now
        return now == before and all(idle and not backlog for idle, backlog, _ in now)

    eventually("the topic idle without new markers", quiet, timeout=15)


def test_our_client_subscribed_on_both_sides(fast_pair: Pair) -> None:
    """Issue 45.4 with our client: `s` subscribed as replicated on B first
    and on A; acknowledged up to 50 on A, it resumes on B after 40 at the
    latest. Readers on both sides read exactly the 100 messages and stop
    (GetLastMessageId passes over trailing markers); an idle topic gets no
    more snapshots; the flag outlives a restart (isReplicated) and the
    state goes on replicating after it."""
    a, b = fast_pair
    topic = "persistent://public/geo/replicated-ours"
    earliest = mclient.InitialPosition.Earliest
    with mclient.Client(a.url) as client_a, mclient.Client(b.url) as client_b:
        sub_a = client_a.subscribe(
            topic, "s", initial_position=earliest, replicate_subscription_state_enabled=True
        )
        client_b.subscribe(
            topic, "s", initial_position=earliest, replicate_subscription_state_enabled=True
        ).close()
        producer = client_a.create_producer(topic, batching_enabled=False)
        for i in range(1, 41):
            producer.send(str(i).encode())
        plain_b = client_b.subscribe(topic, "plain", initial_position=earliest)
        received = [plain_b.receive(timeout_millis=15000) for _ in range(40)]
        at_40 = _position(received[-1])
        eventually(
            "a snapshot covering message 40 on B",
            lambda: any(s.remotes["b"] >= at_40 for s in a.call(_snapshots(a, topic))),
        )
        for i in range(41, 101):
            producer.send(str(i).encode())
        for _ in range(50):
            sub_a.acknowledge(sub_a.receive(timeout_millis=15000))
        eventually(
            "the mark-delete of s on B past message 40",
            lambda: (found := _mark_delete(b, topic, "s")) is not None and found >= at_40,
            timeout=20,
        )
        sub_a.close()
        sub_b = client_b.subscribe(topic, "s", replicate_subscription_state_enabled=True)
        numbers = [int(text) for text in _drain(sub_b)]
        assert len(numbers) == len(set(numbers)), "duplicates"
        assert set(range(51, 101)) <= set(numbers) <= set(range(41, 101)), numbers
        expected = [str(i) for i in range(1, 101)]
        assert _read_to_end(client_a, topic) == expected
        assert _read_to_end(client_b, topic) == expected
    _entries_settle(fast_pair, topic)
    a.restart()
    status, stats = http_call(
        "GET", f"{a.http_url}/admin/v2/persistent/public/geo/replicated-ours/stats"
    )
    assert status == 200, stats
    assert stats["subscriptions"]["s"]["isReplicated"] is True
    # ... and replication of its state goes on: acks after the restart move
    # s on B again.
    before = _mark_delete(b, topic, "s")
    assert before is not None
    with mclient.Client(a.url) as client_a:
        sub_a = client_a.subscribe(topic, "s")  # without the flag: it stays
        producer = client_a.create_producer(topic, batching_enabled=False)
        for i in range(101, 121):
            producer.send(str(i).encode())
        _drain(sub_a)
        eventually(
            "s on B moved after A restarted",
            lambda: (found := _mark_delete(b, topic, "s")) is not None and found > before,
            timeout=20,
        )


def test_replicated_status_admin(broker: BrokerThread) -> None:
    """Issue 45.4: Pulsar's replicatedSubscriptionStatus: GET answers by
    topic, POST true / false sets the flag on every partition; a missing
    subscription is 404, a body that is not a boolean 400."""
    base = f"{broker.http_url}/admin/v2/persistent/public/default"
    status, _ = http_call("PUT", f"{base}/status-parts/partitions", 2)
    assert status == 204
    status, _ = http_call(
        "PUT", f"{base}/status-parts/subscription/s", {"ledgerId": -1, "entryId": -1}
    )
    assert status == 204
    path = f"{base}/status-parts/subscription/s/replicatedSubscriptionStatus"
    parts = [f"persistent://public/default/status-parts-partition-{i}" for i in range(2)]
    assert http_call("GET", path) == (200, dict.fromkeys(parts, False))
    assert http_call("POST", path, True)[0] == 204
    assert http_call("GET", path) == (200, dict.fromkeys(parts, True))
    assert http_call("POST", path, False)[0] == 204
    assert http_call("GET", path) == (200, dict.fromkeys(parts, False))
    assert http_call("POST", path, "yes")[0] == 400
    missing = f"{base}/status-parts/subscription/nope/replicatedSubscriptionStatus"
    assert http_call("GET", missing)[0] == 404
    assert http_call("POST", missing, True)[0] == 404


def test_three_clusters(broker_factory: BrokerFactory) -> None:
    """Issue 45.4 with three clusters (two rounds of requests per snapshot):
    acknowledged up to 40 on A, `s` resumes on B and on C (created there by
    the update) after 20 at the earliest, with every one of 41..60."""
    fast = {"replicated_subscriptions_snapshot_frequency_millis": 100}
    clusters = {name: broker_factory(cluster_name=name, **fast) for name in "abc"}
    link(clusters)
    a = clusters["a"]
    topic = "persistent://public/geo/replicated-three"
    earliest = pulsar.InitialPosition.Earliest
    with contextlib.ExitStack() as stack:
        opened = {
            name: stack.enter_context(official_client(broker.url))
            for name, broker in clusters.items()
        }
        sub_a = opened["a"].subscribe(
            topic, "s", initial_position=earliest, replicate_subscription_state_enabled=True
        )
        producer = opened["a"].create_producer(topic, batching_enabled=False)
        for i in range(1, 21):
            producer.send(str(i).encode())
        at_20: dict[str, Position] = {}
        for name in "bc":
            plain = opened[name].subscribe(topic, "plain", initial_position=earliest)
            at_20[name] = _position([plain.receive(timeout_millis=15000) for _ in range(20)][-1])
        eventually(
            "a snapshot covering message 20 on B and C",
            lambda: any(
                all(s.remotes[n] >= at_20[n] for n in "bc") for s in a.call(_snapshots(a, topic))
            ),
        )
        for i in range(21, 61):
            producer.send(str(i).encode())
        for _ in range(40):
            sub_a.acknowledge(sub_a.receive(timeout_millis=15000))

        def moved(name: str) -> bool:
            found = _mark_delete(clusters[name], topic, "s")
            return found is not None and found >= at_20[name]

        eventually(
            "the mark-delete of s on B and C past message 20",
            lambda: all(map(moved, "bc")),
            timeout=20,
        )
        sub_a.close()
        for name in "bc":
            # Not acknowledged: an ack on B would move s on C too.
            consumer = opened[name].subscribe(topic, "s")
            numbers = [int(text) for text in _drain(consumer, ack=False)]
            consumer.close()
            assert len(numbers) == len(set(numbers)), (name, "duplicates")
            assert set(range(41, 61)) <= set(numbers) <= set(range(21, 61)), (name, numbers)
