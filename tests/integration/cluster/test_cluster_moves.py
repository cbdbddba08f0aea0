"""Bundles changing owners under load: an admin unload hands a bundle to
another broker, and a SIGKILLed broker's bundles are taken over once its
lease expires (DESIGN "Processes"; SEMANTICS 7, deduplication)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pulsar
import pytest

from tests.integration.cluster.cluster_support import TIMEOUT, ClusterBroker
from tests.integration.cluster.conftest import BrokerMaker
from tests.support.http_calls import http_call
from tests.support.official import official_client
from tests.support.polling import eventually

pytestmark = [pytest.mark.slow, pytest.mark.official]


def owner_of(brokers: list[ClusterBroker], topic: str) -> ClusterBroker:
    for broker in brokers:
        if topic in broker.ownership()["topics"]:
            return broker
    raise AssertionError(f"nobody serves {topic}")


def read_all(url: str, topic: str, count: int) -> list[str]:
    """Every message of the topic, from the start, with a fresh reader."""
    with official_client(url) as client:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        found: list[str] = []
        while reader.has_message_available():
            found.append(reader.read_next(10_000).data().decode())
        reader.close()
    assert len(found) >= count, (len(found), count)
    return found


class Collector:
    """A consumer draining a subscription on its own thread, acking each."""

    def __init__(self, consumer: Any) -> None:
        self.consumer = consumer
        self.received: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                msg = self.consumer.receive(200)
            except pulsar.Timeout:
                continue
            self.received.append(msg.data().decode())
            self.consumer.acknowledge(msg)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def keep_everything(broker: ClusterBroker) -> None:
    """Unlimited retention on public/default: consumed messages stay readable."""
    body = {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}
    url = f"{broker.http_url}/admin/v2/namespaces/public/default/retention"
    status, answer = http_call("POST", url, body)
    assert status == 204, answer


def backlog(broker: ClusterBroker, topic: str, subscription: str) -> int:
    path = topic.replace("://", "/")
    status, body = http_call("GET", f"{broker.http_url}/admin/v2/{path}/stats")
    assert status == 200, body
    return int(body["subscriptions"][subscription]["msgBacklog"])


def test_unload_moves_a_topic_with_a_consumer_attached(cluster_broker: BrokerMaker) -> None:
    """The owner hands the bundle over while a producer and a consumer are
    attached: the topic is served by another broker afterwards, the consumer
    goes on from its cursor and every message arrives once, none lost (dedup
    on; SEM-3.9: acked messages are never delivered again)."""
    brokers = [cluster_broker(broker_deduplication_enabled="true") for _ in range(3)]
    topic = "persistent://public/default/moving"
    keep_everything(brokers[0])
    with official_client(brokers[0].url) as client:
        consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
        collector = Collector(consumer)
        producer = client.create_producer(topic, producer_name="mover", batching_enabled=False)
        before = owner_of(brokers, topic)
        sent = [str(i) for i in range(200)]
        for payload in sent[:100]:
            producer.send(payload.encode())
        # The client groups acks: wait until the owner has them all, so
        # that what follows is about the move, not about acks in flight.
        eventually("acks reached the owner", lambda: backlog(before, topic, "sub") == 0, TIMEOUT)
        _, bundle = http_call(
            "GET", f"{before.http_url}/admin/v2/{topic.replace('://', '/')}/bundle"
        )
        path = f"/admin/v2/namespaces/public/default/{bundle}/unload"
        status, body = http_call("PUT", before.http_url + path)
        assert status == 204, body
        for payload in sent[100:]:
            producer.send(payload.encode())
        eventually("every message consumed", lambda: len(collector.received) >= len(sent), TIMEOUT)
        after = owner_of(brokers, topic)
        eventually("every ack stored", lambda: backlog(after, topic, "sub") == 0, TIMEOUT)
        collector.stop()
        producer.close()
        consumer.close()
    assert after is not before
    assert collector.received == sent
    assert read_all(brokers[1].url, topic, len(sent)) == sent


@pytest.mark.parametrize("how", ["kill", "stop"])
def test_a_lost_broker_topics_come_back_on_the_others(
    cluster_broker: BrokerMaker, how: str
) -> None:
    """SIGKILL of a broker under load (its topics are served by the others
    after its lease expires) or SIGTERM (a graceful shutdown hands them back
    at once): every acknowledged message is stored exactly once, and
    consumers carry on from their cursors."""
    brokers = [cluster_broker(broker_deduplication_enabled="true") for _ in range(3)]
    lose_a_broker_under_load(
        brokers, lambda victim: victim.kill() if how == "kill" else victim.stop()
    )


def lose_a_broker_under_load(
    brokers: list[ClusterBroker], lose: Callable[[ClusterBroker], None]
) -> None:
    """Eight topics produced to (dedup, send timeout 0) and consumed while
    `lose` takes one of the brokers that serve some: its topics end up served
    by the others, every acknowledged message is stored once and in order,
    and every consumer got each of them."""
    topics = [f"persistent://public/default/crash-{i}" for i in range(8)]
    keep_everything(brokers[0])
    acked: dict[str, list[str]] = {t: [] for t in topics}
    lock = threading.Lock()
    with official_client(brokers[0].url, operation_timeout_seconds=30) as client:
        producers = {
            t: client.create_producer(
                t, producer_name=f"p-{i}", batching_enabled=False, send_timeout_millis=0
            )
            for i, t in enumerate(topics)
        }
        consumers = {t: client.subscribe(t, "sub") for t in topics}
        collectors = {t: Collector(c) for t, c in consumers.items()}
        victim = next(b for b in brokers[1:] if b.ownership()["topics"])
        victim_topics = set(victim.ownership()["topics"])

        def on_sent(topic: str, payload: str) -> Any:
            def done(result: Any, _msg_id: Any) -> None:
                if result == pulsar.Result.Ok:
                    with lock:
                        acked[topic].append(payload)

            return done

        for round_ in range(60):
            if round_ == 20:
                lose(victim)
            for t, producer in producers.items():
                payload = f"{t[-1]}:{round_}"
                producer.send_async(payload.encode(), on_sent(t, payload))
            time.sleep(0.05)
        for producer in producers.values():
            producer.flush()
        survivors = [b for b in brokers if b is not victim]
        eventually(
            "consumers caught up",
            lambda: all(len(collectors[t].received) >= len(acked[t]) for t in topics),
            timeout=30,
        )
        for collector in collectors.values():
            collector.stop()
        served = {t for b in survivors for t in b.ownership()["topics"]}
        for producer in producers.values():
            producer.close()
        for consumer in consumers.values():
            consumer.close()
    assert victim_topics <= served
    for t in topics:
        expected = sorted(acked[t], key=lambda p: int(p.split(":")[1]))
        assert len(expected) == 60, (t, len(expected))
        stored = read_all(survivors[0].url, t, len(expected))
        assert stored == expected, t
        assert set(collectors[t].received) == set(expected), t
