"""Geo-replication's health and pace (issue 45.3): the replication section
of topic stats (Pulsar's ReplicatorStats) and Pulsar's pulsar_replication_*
metrics while the remote cluster is out of reach and after it comes, the
backlog quota counting the replication cursor, and replicatorDispatchRate."""

from __future__ import annotations

import time
import urllib.request
from typing import Any

import pulsar
import pytest

from tests.support.brokers import BrokerFactory, BrokerThread
from tests.support.georep import admin, register
from tests.support.http_calls import http_call
from tests.support.official import official_client
from tests.support.polling import eventually
from tests.support.ports import free_port

TOPIC = "persistent://public/geo/health"
STATS = "/admin/v2/persistent/public/geo/health/stats"


def _replication(broker: BrokerThread, remote: str) -> dict[str, Any]:
    """The topic's replication section for `remote` ({} while the topic or
    its replicator is not there yet)."""
    status, found = http_call("GET", broker.http_url + STATS)
    if status != 200:
        return {}
    section: dict[str, Any] = found["replication"].get(remote, {})
    return section


def _metric(broker: BrokerThread, name: str, remote: str) -> float | None:
    """The value of `name` for TOPIC and `remote`, None when not exported."""
    with urllib.request.urlopen(broker.http_url + "/metrics", timeout=10) as answer:
        text = answer.read().decode()
    for line in text.splitlines():
        labels = (f'topic="{TOPIC}"', f'remote_cluster="{remote}"')
        if line.startswith(name + "{") and all(label in line for label in labels):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_backlog_delay_and_rates_while_the_remote_is_away_and_back(
    broker_factory: BrokerFactory,
) -> None:
    """Issue 45.3: with cluster b registered at an address nothing listens
    on, A's replicator is not connected, the backlog counts what A stored
    and the delay grows from the oldest message's wait, in the stats and as
    pulsar_replication_* gauges. Once b's data names a running broker, the
    backlog drains, the delay is 0, the connection is named, and while
    messages flow A's rate out and B's rate in (from A's replicator) are
    above 0."""
    a = broker_factory(cluster_name="a", stats_update_frequency_seconds=0.2)
    b = broker_factory(cluster_name="b", stats_update_frequency_seconds=0.2)
    nowhere = f"pulsar://127.0.0.1:{free_port()}"
    register(a, "b", b, brokerServiceUrl=nowhere)
    register(b, "a", a)
    for broker in (a, b):
        admin(broker, "POST", "/admin/v2/tenants/public", {"allowedClusters": ["a", "b"]})
        admin(broker, "PUT", "/admin/v2/namespaces/public/geo")
        admin(broker, "POST", "/admin/v2/namespaces/public/geo/replication", ["a", "b"])

    with official_client(a.url) as client:
        producer = client.create_producer(TOPIC)
        for i in range(5):
            producer.send(b"early-%d" % i)
        sent_at = time.time()
        eventually(
            "the delay passes a second",
            lambda: _replication(a, "b").get("replicationDelayInSeconds", 0.0) >= 1.0,
        )
        away = _replication(a, "b")
        assert away["connected"] is False
        assert away["replicationBacklog"] == 5
        assert away["outboundConnection"] == ""
        assert away["replicationDelayInSeconds"] <= time.time() - sent_at + 1.0
        assert _metric(a, "pulsar_replication_backlog", "b") == 5
        assert _metric(a, "pulsar_replication_connected_count", "b") == 0
        delay = _metric(a, "pulsar_replication_delay_in_seconds", "b")
        assert delay is not None and delay >= 1.0

        register(a, "b", b)  # now b's data names the running broker
        eventually("the backlog drains", lambda: _replication(a, "b")["replicationBacklog"] == 0)
        back = _replication(a, "b")
        assert back["connected"] is True
        assert back["outboundConnection"] == b.url
        assert back["outboundConnectedSince"] != ""
        assert back["msgOutCounter"] == 5
        assert back["replicationDelayInSeconds"] == 0.0
        assert _metric(a, "pulsar_replication_connected_count", "b") == 1
        assert _metric(a, "pulsar_replication_backlog", "b") == 0

        # Rates cover the last stats interval: send while looking.
        seen: dict[str, float] = {}

        def flowing() -> bool:
            producer.send(b"more")
            seen["out"] = max(seen.get("out", 0.0), _replication(a, "b")["msgRateOut"])
            seen["in"] = max(seen.get("in", 0.0), _replication(b, "a").get("msgRateIn", 0.0))
            seen["metric"] = max(
                seen.get("metric", 0.0), _metric(b, "pulsar_replication_rate_in", "a") or 0.0
            )
            return min(seen.values()) > 0

        eventually("A's rate out and B's rate in from A", flowing)
        assert _replication(a, "b")["msgThroughputOut"] >= 0.0


def test_the_replication_backlog_counts_toward_the_backlog_quota(
    broker_factory: BrokerFactory,
) -> None:
    """Issue 45.3: a topic without subscriptions whose remote is away has a
    backlog all the same, its replication cursor's, and a 1-byte
    producer_exception quota refuses new producers for it, as Pulsar's
    quota counts replication cursors; once the remote has everything the
    topic takes producers again."""
    a = broker_factory(cluster_name="a")
    b = broker_factory(cluster_name="b")
    register(a, "b", b, brokerServiceUrl=f"pulsar://127.0.0.1:{free_port()}")
    register(b, "a", a)
    for broker in (a, b):
        admin(broker, "POST", "/admin/v2/tenants/public", {"allowedClusters": ["a", "b"]})
        admin(broker, "PUT", "/admin/v2/namespaces/public/geo")
    admin(a, "POST", "/admin/v2/namespaces/public/geo/replication", ["a", "b"])
    quota = {"limitSize": 1, "policy": "producer_exception"}
    admin(a, "POST", STATS.removesuffix("/stats") + "/backlogQuota", quota)
    with official_client(a.url) as client:
        producer = client.create_producer(TOPIC)
        producer.send(b"x" * 100)
        producer.close()
        with pytest.raises(pulsar.ProducerBlockedQuotaExceededException):
            client.create_producer(TOPIC)
        register(a, "b", b)
        eventually("the backlog drains", lambda: _replication(a, "b")["replicationBacklog"] == 0)
        client.create_producer(TOPIC).send(b"after")


def test_replicator_dispatch_rate_paces_what_goes_to_the_remote(
    linked_pair: tuple[BrokerThread, BrokerThread],
) -> None:
    """Issue 45 (Pulsar's replicatorDispatchRate): with 20 messages per
    second on A's namespace, 60 messages produced at once reach B over at
    least two more periods after the first (without it, well under one), all
    of them, in order; the policy reads back as set."""
    a, b = linked_pair
    rate = {"dispatchThrottlingRateInMsg": 20, "dispatchThrottlingRateInByte": -1}
    path = "/admin/v2/namespaces/public/geo/replicatorDispatchRate"
    admin(a, "POST", path, {**rate, "ratePeriodInSecond": 1})
    assert admin(a, "GET", path) == {**rate, "ratePeriodInSecond": 1}
    topic = "persistent://public/geo/paced"
    with official_client(a.url) as client_a, official_client(b.url) as client_b:
        consumer = client_b.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        producer = client_a.create_producer(topic, batching_enabled=False)
        for i in range(60):
            producer.send_async(b"%02d" % i, None)
        producer.flush()
        got = [consumer.receive(15000)]
        first = time.monotonic()
        got += [consumer.receive(15000) for _ in range(59)]
        elapsed = time.monotonic() - first
    assert [m.data() for m in got] == [b"%02d" % i for i in range(60)]
    assert elapsed >= 1.5, f"60 messages at 20/s arrived within {elapsed:.2f} s"
