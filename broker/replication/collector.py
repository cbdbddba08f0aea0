"""Pulsar's pulsar_replication_* gauges (issue 45.3), read from the
replicators when scraped: labelled like Pulsar's topic series plus
remote_cluster; with topic-level metrics off, summed per namespace."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from magnetar.broker.replication.replicator import Replicator

# (name, help, what of a replicator)
_SERIES: tuple[tuple[str, str, Callable[[Replicator], float]], ...] = (
    (
        "pulsar_replication_rate_in",
        "Messages per second the remote cluster's replicator stored here",
        lambda r: r.incoming.msg_rate,
    ),
    (
        "pulsar_replication_throughput_in",
        "Bytes per second the remote cluster's replicator stored here",
        lambda r: r.incoming.byte_rate,
    ),
    (
        "pulsar_replication_rate_out",
        "Messages per second the remote cluster acknowledged",
        lambda r: r.out.msg_rate,
    ),
    (
        "pulsar_replication_throughput_out",
        "Bytes per second the remote cluster acknowledged",
        lambda r: r.out.byte_rate,
    ),
    (
        "pulsar_replication_backlog",
        "Messages the remote cluster does not have yet",
        lambda r: r.backlog,
    ),
    (
        "pulsar_replication_connected_count",
        "Replicators with an open producer on the remote cluster",
        lambda r: 1 if r.connected else 0,
    ),
    (
        "pulsar_replication_delay_in_seconds",
        "Age of the oldest message the remote cluster does not have yet",
        lambda r: r.delay_seconds,
    ),
)


class ReplicationCollector(Collector):
    """Pulsar's pulsar_replication_* gauges, read from the replicators when
    scraped."""

    def __init__(
        self, replicators: Callable[[], list[Replicator]], cluster: str, *, per_topic: bool
    ) -> None:
        self._replicators = replicators
        self.cluster = cluster
        self.per_topic = per_topic

    def describe(self) -> Iterator[Metric]:
        yield from self._families([])

    def collect(self) -> Iterator[Metric]:
        yield from self._families(self._replicators())

    def _families(self, replicators: list[Replicator]) -> Iterator[Metric]:
        labels = ["cluster", "namespace", "topic", "remote_cluster"]
        if not self.per_topic:
            labels.remove("topic")
        for name, doc, value in _SERIES:
            sums: dict[tuple[str, ...], float] = {}
            for replicator in replicators:
                topic = replicator.topic
                key: tuple[str, ...] = (self.cluster, topic.topic_name.namespace_name, topic.name)
                if not self.per_topic:
                    key = key[:2]
                key = (*key, replicator.remote_cluster)
                sums[key] = sums.get(key, 0.0) + value(replicator)
            gauge = GaugeMetricFamily(name, doc, labels=labels)
            for key, total in sums.items():
                gauge.add_metric(list(key), total)
            yield gauge
