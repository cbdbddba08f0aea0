"""/metrics and the admin stats after a known workload (issue 13): Pulsar's
per-topic and per-subscription series with their labels and values, the
switch that sums them per namespace instead, and the rates of the periodic
stats update in the admin topic stats (Pulsar's field names)."""

from __future__ import annotations

import time
import urllib.request
from typing import Any

import pulsar
from prometheus_client.parser import text_string_to_metric_families

from tests.support.brokers import BrokerFactory, BrokerThread
from tests.support.http_calls import http_call
from tests.support.official import official_client
from tests.support.polling import eventually

NS = "public/default"


def _scrape(broker: BrokerThread) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of /metrics by (name, labels)."""
    with urllib.request.urlopen(f"{broker.http_url}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _labels(**labels: str) -> frozenset[tuple[str, str]]:
    return frozenset({"cluster": "standalone", **labels}.items())


def test_topic_and_subscription_series_after_a_known_workload(broker: BrokerThread) -> None:
    """10 messages of 5 bytes: one subscription nobody reads keeps all of them
    as backlog; another receives all and acknowledges none."""
    topic = "persistent://public/default/metrics-known"
    with official_client(broker.url) as client:
        client.subscribe(topic, "idle").close()
        live = client.subscribe(topic, "live", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(10):
            producer.send(f"msg-{i}".encode())
        for _ in range(10):
            live.receive(timeout_millis=10_000)
        samples = _scrape(broker)
    own = _labels(namespace=NS, topic=topic)
    assert samples[("pulsar_in_messages_total", own)] == 10
    assert samples[("pulsar_out_messages_total", own)] == 10
    assert samples[("pulsar_producers_count", own)] == 1
    assert samples[("pulsar_consumers_count", own)] == 1
    assert samples[("pulsar_subscriptions_count", own)] == 2
    assert samples[("pulsar_msg_backlog", own)] == 20
    stored = samples[("pulsar_storage_size", own)]
    assert samples[("pulsar_in_bytes_total", own)] == stored > 10 * 5
    idle = _labels(namespace=NS, topic=topic, subscription="idle")
    live_labels = _labels(namespace=NS, topic=topic, subscription="live")
    assert samples[("pulsar_subscription_back_log", idle)] == 10
    assert samples[("pulsar_subscription_back_log", live_labels)] == 10
    assert samples[("pulsar_subscription_unacked_messages", live_labels)] == 10
    assert samples[("pulsar_subscription_unacked_messages", idle)] == 0
    assert samples[("pulsar_subscription_delayed", idle)] == 0
    assert samples[("pulsar_storage_write_latency_seconds_count", own)] >= 1
    assert samples[("pulsar_topics_count", _labels(namespace=NS))] == 1
    assert samples[("pulsar_broker_topics_count", _labels())] == 1
    assert samples[("pulsar_broker_msg_backlog", _labels())] == 20
    assert samples[("pulsar_active_connections", frozenset())] == 1
    # The process collector of the broker's own registry.
    assert samples[("process_resident_memory_bytes", frozenset())] > 0


def test_switch_off_sums_topics_per_namespace(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(expose_topic_level_metrics_in_prometheus=False)
    with official_client(broker.url) as client:
        for name in ("switch-a", "switch-b"):
            client.subscribe(name, "idle").close()
            producer = client.create_producer(name, batching_enabled=False)
            for _ in range(3):
                producer.send(b"x")
        samples = _scrape(broker)
    assert not [
        key for key in samples if ("topic", "persistent://public/default/switch-a") in key[1]
    ]
    assert not [key for key in samples if key[0].startswith("pulsar_subscription_back_log")]
    ns = _labels(namespace=NS)
    assert samples[("pulsar_in_messages_total", ns)] == 6
    assert samples[("pulsar_msg_backlog", ns)] == 6
    assert samples[("pulsar_subscriptions_count", ns)] == 2
    assert samples[("pulsar_topics_count", ns)] == 2


def _rates_seen(stats: dict[str, Any]) -> bool:
    sub = stats["subscriptions"]["s"]
    return (
        stats["msgRateIn"] > 0
        and stats["msgThroughputIn"] > 0
        and stats["msgRateOut"] > 0
        and stats["msgThroughputOut"] > 0
        and sub["msgRateOut"] > 0
        and sub["msgThroughputOut"] > 0
        and sub["msgRateRedeliver"] > 0
        and bool(sub["consumers"])
        and sub["consumers"][0]["msgRateOut"] > 0
    )


def test_admin_stats_show_rates_after_a_workload(broker_factory: BrokerFactory) -> None:
    """Rates come from the periodic stats update (here every 0.2 s): while
    messages flow (some of them redelivered), the admin stats show them."""
    broker = broker_factory(stats_update_frequency_seconds=0.2)
    topic = "persistent://public/default/admin-rates"
    url = f"{broker.http_url}/admin/v2/persistent/public/default/admin-rates/stats"
    with official_client(broker.url) as client:
        consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic, batching_enabled=False)
        deadline = time.monotonic() + 20
        stats: dict[str, Any] = {}
        while time.monotonic() < deadline:
            for _ in range(20):
                producer.send(b"payload")
            received = [consumer.receive(timeout_millis=10_000) for _ in range(20)]
            consumer.redeliver_unacknowledged_messages()
            for _ in received:
                consumer.acknowledge(consumer.receive(timeout_millis=10_000))
            status, stats = http_call("GET", url)
            assert status == 200
            if _rates_seen(stats):
                break
        assert _rates_seen(stats), stats
    assert stats["msgInCounter"] >= 20 and stats["bytesInCounter"] > 0
    assert stats["subscriptions"]["s"]["msgOutCounter"] >= 40  # sent twice


def test_entry_cache_holds_entries_only_while_a_consumer_will_read_them(
    broker_factory: BrokerFactory,
) -> None:
    """SEM-5.5 as Pulsar keeps it: the broker caches what it writes for the
    consumers reading a topic; a topic nobody reads adds nothing to the cache
    (magnetar_storage_cache_used_bytes), entries the consumer has read leave
    it without waiting for the budget or the age threshold, and the last
    consumer leaving drops what its topic held."""
    broker = broker_factory(entry_cache_eviction_threshold_seconds=600.0)
    used = ("magnetar_storage_cache_used_bytes", frozenset[tuple[str, str]]())
    written = "persistent://public/default/cache-write-only"
    read = "persistent://public/default/cache-read"
    payload = b"c" * 1000
    with official_client(broker.url) as client:
        client.subscribe(written, "nobody-connected").close()
        producer = client.create_producer(written, batching_enabled=False)
        for _ in range(20):
            producer.send(payload)
        assert _scrape(broker)[used] == 0

        # A queue of one: the broker reads one entry ahead, the rest wait cached.
        consumer = client.subscribe(read, "reading", receiver_queue_size=1)
        producer = client.create_producer(read, batching_enabled=False)
        for _ in range(20):
            producer.send(payload)
        assert _scrape(broker)[used] >= 15 * len(payload)
        for _ in range(20):
            consumer.acknowledge(consumer.receive(timeout_millis=10_000))
        # Everything is read, the consumer still connected: nothing stays.
        eventually("the read entries leave the cache", lambda: _scrape(broker)[used] == 0)
        producer.send(payload)
        consumer.acknowledge(consumer.receive(timeout_millis=10_000))
        consumer.close()
        assert _scrape(broker)[used] == 0
