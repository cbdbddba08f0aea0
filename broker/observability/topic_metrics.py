"""Topic, subscription and broker metrics, built at scrape time.

A prometheus-client Collector walks the loaded topics when scraped and
reads the plain counters the publish and dispatch paths keep (counters.py),
the rates of the last stats update (stats_update.py), and what storage
knows (sizes, backlogs, the write latency buckets of each ledger). Nothing
here runs per message.

Names and labels are Pulsar's: topic series carry cluster, namespace and
topic, subscription series add subscription, `pulsar_broker_*` carry cluster
only. With `expose_topic_level_metrics_in_prometheus` off (Pulsar's
exposeTopicLevelMetricsInPrometheus), topic series are summed per namespace
and subscription series are left out, for brokers with many topics.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, fields

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from magnetar.broker.policies.backlog_quota import backlog_bytes
from magnetar.broker.storage.api import WRITE_LATENCY_BOUNDS
from magnetar.broker.topics.base import Subscription, Topic, is_persistent

WRITE_LATENCY = "pulsar_storage_write_latency_seconds"


@dataclass(slots=True)
class TopicSample:
    """One topic's numbers (or a namespace's, summed)."""

    subscriptions: int = 0
    producers: int = 0
    consumers: int = 0
    rate_in: float = 0.0
    rate_out: float = 0.0
    throughput_in: float = 0.0
    throughput_out: float = 0.0
    in_messages: int = 0
    in_bytes: int = 0
    out_messages: int = 0
    out_bytes: int = 0
    storage_size: int = 0
    backlog_size: int = 0
    msg_backlog: int = 0
    storage_write_rate: float = 0.0
    delayed: int = 0
    delayed_total: int = 0
    duplicates: int = 0
    latency_counts: list[int] = field(default_factory=lambda: [0] * (len(WRITE_LATENCY_BOUNDS) + 1))
    latency_sum: float = 0.0

    def add(self, other: TopicSample) -> None:
        for f in fields(self):
            if f.name == "latency_counts":
                self.latency_counts = [
                    a + b for a, b in zip(self.latency_counts, other.latency_counts, strict=True)
                ]
            else:
                setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


@dataclass(frozen=True, slots=True)
class SubscriptionSample:
    name: str
    back_log: int
    unacked: int
    rate_out: float
    throughput_out: float
    rate_redeliver: float
    delayed: int
    delayed_total: int


# (name, help, TopicSample field): gauges, then counters (exported as *_total).
TOPIC_GAUGES = (
    ("pulsar_subscriptions_count", "Subscriptions of the topic", "subscriptions"),
    ("pulsar_producers_count", "Connected producers", "producers"),
    ("pulsar_consumers_count", "Connected consumers", "consumers"),
    ("pulsar_rate_in", "Messages published per second", "rate_in"),
    ("pulsar_rate_out", "Messages dispatched per second", "rate_out"),
    ("pulsar_throughput_in", "Bytes published per second", "throughput_in"),
    ("pulsar_throughput_out", "Bytes dispatched per second", "throughput_out"),
    ("pulsar_storage_size", "Bytes of entries stored", "storage_size"),
    (
        "pulsar_storage_backlog_size",
        "Bytes the slowest subscription has yet to read",
        "backlog_size",
    ),
    (
        "pulsar_msg_backlog",
        "Messages not yet acknowledged, summed over subscriptions",
        "msg_backlog",
    ),
    ("pulsar_storage_write_rate", "Entries written to storage per second", "storage_write_rate"),
)
TOPIC_COUNTERS = (
    ("pulsar_in_messages", "Messages published", "in_messages"),
    ("pulsar_in_bytes", "Bytes published", "in_bytes"),
    ("pulsar_out_messages", "Messages dispatched to consumers", "out_messages"),
    ("pulsar_out_bytes", "Bytes dispatched to consumers", "out_bytes"),
    ("magnetar_dedup_duplicates", "SENDs answered as duplicates and not stored", "duplicates"),
)
# Subscription series; summed per namespace when topic metrics are off.
DELAYED = ("pulsar_subscription_delayed", "Entries held for a later delivery time", "delayed")
DELAYED_TOTAL = (
    "magnetar_subscription_delayed_entries",
    "Entries ever held for a later delivery time",
    "delayed_total",
)
SUBSCRIPTION_GAUGES = (
    ("pulsar_subscription_back_log", "Messages not yet acknowledged", "back_log"),
    ("pulsar_subscription_unacked_messages", "Messages sent and not yet acknowledged", "unacked"),
    ("pulsar_subscription_msg_rate_out", "Messages dispatched per second", "rate_out"),
    ("pulsar_subscription_msg_throughput_out", "Bytes dispatched per second", "throughput_out"),
    (
        "pulsar_subscription_msg_rate_redeliver",
        "Messages dispatched again per second",
        "rate_redeliver",
    ),
)
# Broker-wide (label cluster), from the same samples.
BROKER_GAUGES: tuple[tuple[str, str, str | None], ...] = (
    ("pulsar_broker_topics_count", "Loaded topics", None),
    ("pulsar_broker_subscriptions_count", "Subscriptions of loaded topics", "subscriptions"),
    ("pulsar_broker_producers_count", "Connected producers", "producers"),
    ("pulsar_broker_consumers_count", "Connected consumers", "consumers"),
    ("pulsar_broker_rate_in", "Messages published per second", "rate_in"),
    ("pulsar_broker_rate_out", "Messages dispatched per second", "rate_out"),
    ("pulsar_broker_throughput_in", "Bytes published per second", "throughput_in"),
    ("pulsar_broker_throughput_out", "Bytes dispatched per second", "throughput_out"),
    ("pulsar_broker_storage_size", "Bytes of entries stored", "storage_size"),
    ("pulsar_broker_msg_backlog", "Messages not yet acknowledged", "msg_backlog"),
)
TOPICS_COUNT = ("pulsar_topics_count", "Loaded topics of the namespace")


def _subscription_sample(name: str, sub: Subscription) -> SubscriptionSample:
    return SubscriptionSample(
        name=name,
        back_log=sub.stats().msg_backlog,
        unacked=sub.unacked_messages,
        rate_out=sub.dispatched.msg_rate,
        throughput_out=sub.dispatched.byte_rate,
        rate_redeliver=sub.redelivered.msg_rate,
        delayed=sub.delayed_messages,
        delayed_total=sub.delayed_total,
    )


def sample_topic(topic: Topic) -> tuple[TopicSample, list[SubscriptionSample]]:
    """Read one topic's numbers (and its subscriptions'), without I/O."""
    subs = [_subscription_sample(n, s) for n, s in list(topic.subscriptions.items())]
    sample = TopicSample(
        producers=len(topic.producers),
        consumers=sum(len(s.consumers) for s in list(topic.subscriptions.values())),
        rate_in=topic.published.msg_rate,
        throughput_in=topic.published.byte_rate,
        in_messages=topic.published.messages,
        in_bytes=topic.published.bytes,
        rate_out=topic.dispatched.msg_rate,
        throughput_out=topic.dispatched.byte_rate,
        out_messages=topic.dispatched.messages,
        out_bytes=topic.dispatched.bytes,
    )
    if is_persistent(topic):
        ledger = topic.ledger
        subs.extend(
            SubscriptionSample(c.name, c.backlog_messages, 0, 0.0, 0.0, 0.0, 0, 0)
            for c in topic.idle_cursors()
        )
        sample.storage_size = ledger.total_size
        sample.backlog_size = backlog_bytes(ledger)
        sample.storage_write_rate = topic.storage_writes.msg_rate
        sample.duplicates = topic.duplicates
        written = ledger.write_stats()
        sample.latency_counts = list(written.write_latency_counts)
        sample.latency_sum = written.write_latency_sum
    sample.subscriptions = len(subs)
    sample.msg_backlog = sum(s.back_log for s in subs)
    sample.delayed = sum(s.delayed for s in subs)
    sample.delayed_total = sum(s.delayed_total for s in subs)
    return sample, subs


def _buckets(counts: list[int]) -> list[tuple[str, float]]:
    """Cumulative (le, count) pairs from per-bucket counts."""
    out: list[tuple[str, float]] = []
    running = 0
    for bound, count in zip((*WRITE_LATENCY_BOUNDS, float("inf")), counts, strict=True):
        running += count
        out.append(("+Inf" if bound == float("inf") else repr(bound), float(running)))
    return out


class TopicMetricsCollector(Collector):
    def __init__(
        self, topics: Callable[[], Iterable[Topic]], cluster: str, *, per_topic: bool = True
    ) -> None:
        self._topics = topics
        self.cluster = cluster
        self.per_topic = per_topic

    def describe(self) -> Iterator[Metric]:
        """The families without samples: registration never walks topics."""
        yield from self._families([], {})

    def collect(self) -> Iterator[Metric]:
        topics = list(self._topics())
        samples = [(topic, *sample_topic(topic)) for topic in topics]
        namespaces: dict[str, int] = {}
        for topic, _, _ in samples:
            ns = topic.topic_name.namespace_name
            namespaces[ns] = namespaces.get(ns, 0) + 1
        rows: list[tuple[list[str], TopicSample, list[SubscriptionSample]]] = []
        if self.per_topic:
            for topic, sample, subs in samples:
                rows.append(
                    ([self.cluster, topic.topic_name.namespace_name, topic.name], sample, subs)
                )
        else:
            summed: dict[str, TopicSample] = {}
            for topic, sample, _ in samples:
                summed.setdefault(topic.topic_name.namespace_name, TopicSample()).add(sample)
            rows = [([self.cluster, ns], sample, []) for ns, sample in summed.items()]
        yield from self._families(rows, namespaces)

    def _families(
        self,
        rows: list[tuple[list[str], TopicSample, list[SubscriptionSample]]],
        namespaces: dict[str, int],
    ) -> Iterator[Metric]:
        labels = ["cluster", "namespace", "topic"] if self.per_topic else ["cluster", "namespace"]
        sub_labels = [*labels, "subscription"]
        for name, doc, attr in TOPIC_GAUGES:
            gauge = GaugeMetricFamily(name, doc, labels=labels)
            for values, sample, _ in rows:
                gauge.add_metric(values, getattr(sample, attr))
            yield gauge
        for name, doc, attr in TOPIC_COUNTERS:
            counter = CounterMetricFamily(name, doc, labels=labels)
            for values, sample, _ in rows:
                counter.add_metric(values, getattr(sample, attr))
            yield counter
        histogram = HistogramMetricFamily(
            WRITE_LATENCY,
            "Group commits by time from their oldest entry queued to durable",
            labels=labels,
        )
        for values, sample, _ in rows:
            histogram.add_metric(values, _buckets(sample.latency_counts), sample.latency_sum)
        yield histogram
        # Per subscription with topic metrics on; per namespace otherwise.
        for (name, doc, attr), kind in (
            (DELAYED, GaugeMetricFamily),
            (DELAYED_TOTAL, CounterMetricFamily),
        ):
            family = kind(name, doc, labels=sub_labels if self.per_topic else labels)
            for values, sample, subs in rows:
                if self.per_topic:
                    for sub in subs:
                        family.add_metric([*values, sub.name], getattr(sub, attr))
                else:
                    family.add_metric(values, getattr(sample, attr))
            yield family
        if self.per_topic:
            for name, doc, attr in SUBSCRIPTION_GAUGES:
                gauge = GaugeMetricFamily(name, doc, labels=sub_labels)
                for values, _, subs in rows:
                    for sub in subs:
                        gauge.add_metric([*values, sub.name], getattr(sub, attr))
                yield gauge
        count = GaugeMetricFamily(*TOPICS_COUNT, labels=["cluster", "namespace"])
        for ns, n in namespaces.items():
            count.add_metric([self.cluster, ns], n)
        yield count
        total = TopicSample()
        for _, sample, _ in rows:
            total.add(sample)
        for name, doc, key in BROKER_GAUGES:
            gauge = GaugeMetricFamily(name, doc, labels=["cluster"])
            value = sum(namespaces.values()) if key is None else getattr(total, key)
            gauge.add_metric([self.cluster], value)
            yield gauge
