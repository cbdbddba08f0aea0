"""Prometheus metrics of one broker instance.

Each BrokerServer owns its own CollectorRegistry (never the global one), so
several brokers in one test process do not collide. Names follow Pulsar's
`pulsar_*` vocabulary where one exists.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

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
        self.topics = Gauge("pulsar_topics_count", "Loaded topics", registry=r)
        self.producers = Gauge("pulsar_producers_count", "Connected producers", registry=r)
        self.consumers = Gauge("pulsar_consumers_count", "Connected consumers", registry=r)
        self.subscriptions = Gauge(
            "pulsar_subscriptions_count", "Subscriptions of loaded topics", registry=r
        )
        self.messages_in = Counter(
            "pulsar_in_messages", "Messages published (batch members counted)", registry=r
        )
        self.bytes_in = Counter("pulsar_in_bytes", "Entry bytes published", registry=r)
        self.entries_in = Counter("magnetar_in_entries", "Entries appended", registry=r)
        self.messages_out = Counter(
            "pulsar_out_messages", "Messages dispatched to consumers", registry=r
        )
        self.bytes_out = Counter("pulsar_out_bytes", "Entry bytes dispatched", registry=r)
        self.redelivered = Counter(
            "magnetar_redelivered_messages", "Messages dispatched again", registry=r
        )
        self.storage_writable = Gauge(
            "magnetar_storage_writable",
            "1 while appends succeed, 0 after a failed one until one succeeds again",
            registry=r,
        )
        self.publish_errors = Counter(
            "magnetar_publish_errors", "SENDs answered with SEND_ERROR", ["error"], registry=r
        )
        self.publish_latency = Histogram(
            "pulsar_storage_write_latency_seconds",
            "From SEND received to entry durable",
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 5.0),
            registry=r,
        )

        # Storage's process-wide counters (write errors, group commits, ...).
        storage_metrics.register(r)

    def render(self) -> bytes:
        return generate_latest(self.registry)
