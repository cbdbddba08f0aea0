"""Replication metrics (Prometheus), labelled by remote cluster."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class ReplicationMetrics:
    def __init__(self, registry: CollectorRegistry | None) -> None:
        self.messages_out = Counter(
            "magnetar_replication_messages_out",
            "Messages the remote cluster acknowledged to this broker's replicators",
            ["remote_cluster"],
            registry=registry,
        )
        self.bytes_out = Counter(
            "magnetar_replication_bytes_out",
            "Bytes the remote cluster acknowledged to this broker's replicators",
            ["remote_cluster"],
            registry=registry,
        )
        self.errors = Counter(
            "magnetar_replication_errors",
            "Replicator producers that failed (connect, authentication, send)",
            ["remote_cluster"],
            registry=registry,
        )
        self.connected = Gauge(
            "magnetar_replication_connected_count",
            "Replicators with an open producer on the remote cluster",
            ["remote_cluster"],
            registry=registry,
        )
