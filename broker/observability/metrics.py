"""Prometheus metrics of one broker instance.

Each BrokerServer owns its own CollectorRegistry (never the global one), so
several brokers in one test process do not collide. Names follow Pulsar's
`pulsar_*` vocabulary where one exists. The connection-level series below
change once per connection event; topic, subscription and broker-wide
series come from topic_metrics.TopicMetricsCollector, built when scraped
from plain counters, so the publish path updates no metric object.
"""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    ProcessCollector,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.gc_collector import GCCollector
from prometheus_client.metrics_core import Metric
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.registry import Collector

from magnetar.broker.observability.loop_lag import LoopLagMonitor
from magnetar.broker.storage import metrics as storage_metrics

__all__ = ["CONTENT_TYPE_LATEST", "BrokerMetrics"]


class BrokerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.connections = Gauge("pulsar_active_connections", "Open client connections", registry=r)
        self.connections_opened = Counter(
            "magnetar_connections_opened", "Client connections accepted", registry=r
        )
        self.connection_errors = Counter(
            "magnetar_connection_errors",
            "Connections closed because of a protocol violation",
            ["reason"],
            registry=r,
        )
        self.publish_throttles = Counter(
            "magnetar_publish_rate_throttled",
            "Times a connection stopped reading for a topic's publishRate policy",
            registry=r,
        )
        self.read_pauses = Counter(
            "magnetar_connection_read_pauses",
            "Times a connection stopped reading: too many publishes (or bytes) awaiting receipts",
            registry=r,
        )
        self.storage_writable = Gauge(
            "magnetar_storage_writable",
            "1 while appends succeed, 0 after a failed one until one succeeds again",
            registry=r,
        )
        self.cache_used = Gauge(
            "magnetar_storage_cache_used_bytes",
            "Memory the entry cache holds: entry data plus each entry's objects "
            "(cached while a consumer reads their topic)",
            registry=r,
        )
        self.loop_lag = LoopLagMonitor(r)
        # Storage's process-wide counters (write errors, group commits, ...).
        storage_metrics.register(r)
        # process_* (CPU, memory, file descriptors), python_info, python_gc_*.
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)

    def snapshot(self) -> CollectorRegistry:
        """Every sample as of now, in a registry of its own.

        Collecting reads topics, so it runs where they change (the event
        loop); formatting the text, most of a scrape's time with many topics,
        can then run on a worker thread (see web.py)."""
        frozen = CollectorRegistry(auto_describe=False)
        frozen.register(_Collected(list(self.registry.collect())))
        return frozen


class _Collected(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def describe(self) -> list[Metric]:
        return []  # nothing to check against other collectors: it stands alone

    def collect(self) -> list[Metric]:
        return self._families
