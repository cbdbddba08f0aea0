"""Geo-replication across crashes (issue 45.2): the remote cluster SIGKILLed
and restarted on its address, and the source cluster SIGKILLed while its
replicator has entries in flight. Every message arrives on the remote
exactly once and in order: the remote deduplicates the replicator's
sequence ids (source positions), also after its own crash."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

from tests.support.brokers import BrokerFactory, BrokerProcess, BrokerThread
from tests.support.georep import Cluster, link
from tests.support.http_calls import http_call
from tests.support.official import official_client
from tests.support.polling import eventually

TOPIC = "persistent://public/geo/crash"
STATS = "/admin/v2/persistent/public/geo/crash/internalStats"


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[dict[str, BrokerProcess]]:
    started: dict[str, BrokerProcess] = {}

    def make(name: str) -> BrokerProcess:
        broker = BrokerProcess(
            tmp_path / f"data-{name}", tmp_path / f"{name}.log", cluster_name=name
        )
        started[name] = broker
        return broker.start()

    make("a")
    make("b")
    yield started
    for broker in started.values():
        broker.stop()


def _entries(cluster: Cluster) -> int:
    status, stats = http_call("GET", cluster.http_url + STATS)
    return int(stats["numberOfEntries"]) if status == 200 else 0


def _all_once_in_order(cluster: Cluster, count: int) -> None:
    with official_client(cluster.url) as client:
        consumer = client.subscribe(
            TOPIC, "check", initial_position=pulsar.InitialPosition.Earliest
        )
        got = []
        for _ in range(count):
            msg = consumer.receive(timeout_millis=30000)
            got.append(int(msg.data()))
            consumer.acknowledge(msg)
        with pytest.raises(pulsar.Timeout):
            consumer.receive(timeout_millis=500)
    assert got == list(range(count))


def _produce(cluster: Cluster, numbers: range) -> None:
    with official_client(cluster.url) as client:
        # Blocking when the client's queue is full: else send_async fails
        # the messages past max_pending_messages, and they are never sent.
        producer = client.create_producer(
            TOPIC,
            batching_enabled=True,
            batching_max_messages=10,
            batching_max_publish_delay_ms=1,
            block_if_queue_full=True,
        )
        failed: list[str] = []

        def sent(result: Any, _msg_id: Any) -> None:
            if result != pulsar.Result.Ok:
                failed.append(str(result))

        for i in numbers:
            producer.send_async(str(i).encode(), sent)
        producer.flush()
        assert failed == []


def test_remote_killed_and_restarted(
    broker_factory: BrokerFactory, processes: dict[str, BrokerProcess]
) -> None:
    """Issue 45.2: B is SIGKILLed while A replicates to it and started again
    on the same ports; A's backlog drains and every message is on B once,
    in order."""
    a: BrokerThread = broker_factory(cluster_name="a")
    b = processes["b"]
    link({"a": a, "b": b})
    _produce(a, range(0, 2000))
    eventually("B has some of the messages", lambda: _entries(b) > 0)
    b.kill()
    _produce(a, range(2000, 3000))
    b.start()
    _all_once_in_order(b, 3000)


def test_source_killed_with_entries_in_flight(processes: dict[str, BrokerProcess]) -> None:
    """Issue 45.2: A is SIGKILLed while its replicator has entries in flight
    (its cursor persisted a second or less before) and started again; the
    resent entries are recognised on B, which ends with every message once,
    in order."""
    a, b = processes["a"], processes["b"]
    link({"a": a, "b": b})
    b.kill()  # A stores everything first, then replicates it in one go
    _produce(a, range(0, 5000))
    b.start()
    eventually("B has some of the messages", lambda: _entries(b) > 0)
    a.kill()
    a.start()
    _all_once_in_order(b, 5000)
