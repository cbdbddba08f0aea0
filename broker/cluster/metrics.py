"""Cluster metrics, in the broker's registry: bundles owned, whether the
etcd session holds, and counters of ownership changes and redirects."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge


class ClusterMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = registry
        self.owned_bundles = Gauge(
            "magnetar_cluster_owned_bundles", "Namespace bundles this broker owns", registry=r
        )
        self.session_valid = Gauge(
            "magnetar_cluster_session_valid",
            "1 while the broker's etcd lease surely lives (it may confirm writes)",
            registry=r,
        )
        self.session_losses = Counter(
            "magnetar_cluster_session_losses", "etcd sessions lost", registry=r
        )
        self.bundles_acquired = Counter(
            "magnetar_cluster_bundles_acquired", "Bundles taken on a lookup", registry=r
        )
        self.bundles_released = Counter(
            "magnetar_cluster_bundles_released",
            "Bundles handed over or released (unload, shutdown)",
            registry=r,
        )
        self.lookup_redirects = Counter(
            "magnetar_cluster_lookup_redirects", "LOOKUP answers that redirect", registry=r
        )

    def watch(self, owned: Callable[[], int], valid: Callable[[], bool]) -> None:
        self.owned_bundles.set_function(lambda: float(owned()))
        self.session_valid.set_function(lambda: 1.0 if valid() else 0.0)
