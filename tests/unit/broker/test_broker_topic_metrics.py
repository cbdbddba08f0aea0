"""The topic metrics collector (issue 13): Pulsar's names and labels, read
at scrape time from real topics over real storage; per namespace when
topic-level metrics are off."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from magnetar.broker.dispatchers.consumer import SubType
from magnetar.broker.observability.stats_update import StatsUpdater
from magnetar.broker.observability.topic_metrics import TopicMetricsCollector
from magnetar.broker.storage import FileManagedLedgerFactory
from magnetar.broker.storage.api import InitialPosition, ManagedLedgerConfig, SyncPolicy
from magnetar.broker.storage.metrics import LatencyBuckets
from magnetar.broker.topics.base import SubscribeOptions, Topic
from magnetar.broker.topics.non_persistent import NonPersistentTopic
from magnetar.broker.topics.persistent import PersistentTopic
from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.frames import Payload
from magnetar.proto.naming import TopicName
from tests.unit.broker.recording import RecordingConnection

PERSISTENT = "persistent://public/default/m"
OTHER_NS = "non-persistent://public/other/n"
TOPIC = {"cluster": "c1", "namespace": "public/default", "topic": PERSISTENT}


@pytest.fixture
async def topics(tmp_path: Path) -> AsyncIterator[list[Topic]]:
    factory = await FileManagedLedgerFactory.create(
        str(tmp_path), ManagedLedgerConfig(sync_policy=SyncPolicy.NONE)
    )
    ledger = await factory.open("public/default/persistent/m")
    persistent = PersistentTopic(TopicName.parse(PERSISTENT), ledger)
    other = NonPersistentTopic(TopicName.parse(OTHER_NS))
    try:
        yield [persistent, other]
    finally:
        await persistent.close(notify_clients=False)
        await other.close(notify_clients=False)
        await factory.close()


def _entry() -> bytes:
    meta = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    return Payload.build(meta, b"y" * 20).data


def _registry(topics: list[Topic], *, per_topic: bool) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(TopicMetricsCollector(lambda: topics, "c1", per_topic=per_topic))
    return registry


async def _workload(topics: list[Topic]) -> int:
    """7 entries of 3 messages on the persistent topic with a subscription
    nobody reads (backlog 21), 2 on the other; returns the entry size."""
    persistent, other = topics
    assert isinstance(persistent, PersistentTopic)
    await persistent.create_subscription("idle", persistent.ledger.first_position)
    data = _entry()
    for _ in range(7):
        await persistent.append(data, 3)
    for _ in range(2):
        await other.append(data, 1)
    return len(data)


async def test_topic_and_subscription_series_with_pulsar_labels(topics: list[Topic]) -> None:
    size = await _workload(topics)
    clock = iter([0.0, 7.0]).__next__
    updater = StatsUpdater(lambda: topics, 5.0, clock)  # reads 0.0 now
    updater.update()  # 7 s later
    registry = _registry(topics, per_topic=True)
    value = registry.get_sample_value
    assert value("pulsar_in_messages_total", TOPIC) == 21
    assert value("pulsar_in_bytes_total", TOPIC) == 7 * size
    assert value("pulsar_rate_in", TOPIC) == 3.0
    assert value("pulsar_throughput_in", TOPIC) == size
    assert value("pulsar_msg_backlog", TOPIC) == 21
    assert value("pulsar_storage_size", TOPIC) == 7 * size
    assert value("pulsar_subscriptions_count", TOPIC) == 1
    assert value("pulsar_producers_count", TOPIC) == 0
    sub = {**TOPIC, "subscription": "idle"}
    assert value("pulsar_subscription_back_log", sub) == 21
    assert value("pulsar_subscription_unacked_messages", sub) == 0
    assert value("pulsar_subscription_delayed", sub) == 0
    # One observation per group commit, each at most the whole histogram.
    groups = value("pulsar_storage_write_latency_seconds_count", TOPIC)
    assert groups is not None and 1 <= groups <= 7
    assert value("pulsar_storage_write_latency_seconds_bucket", {**TOPIC, "le": "+Inf"}) == groups
    other = {"cluster": "c1", "namespace": "public/other", "topic": OTHER_NS}
    assert value("pulsar_in_messages_total", other) == 2
    assert value("pulsar_topics_count", {"cluster": "c1", "namespace": "public/default"}) == 1
    assert value("pulsar_broker_topics_count", {"cluster": "c1"}) == 2
    assert value("pulsar_broker_msg_backlog", {"cluster": "c1"}) == 21


async def test_without_topic_metrics_series_are_summed_per_namespace(
    topics: list[Topic],
) -> None:
    await _workload(topics)
    registry = _registry(topics, per_topic=False)
    text = generate_latest(registry).decode()
    assert PERSISTENT not in text and 'subscription="' not in text
    value = registry.get_sample_value
    ns = {"cluster": "c1", "namespace": "public/default"}
    assert value("pulsar_in_messages_total", ns) == 21
    assert value("pulsar_msg_backlog", ns) == 21
    assert value("pulsar_subscriptions_count", ns) == 1
    assert value("pulsar_in_messages_total", {**ns, "namespace": "public/other"}) == 2
    assert value("pulsar_storage_write_latency_seconds_count", ns) is not None
    assert value("pulsar_subscription_back_log", {**ns, "topic": PERSISTENT}) is None


async def test_consumers_and_unacked_messages(topics: list[Topic]) -> None:
    persistent = topics[0]
    cnx = RecordingConnection()
    options = SubscribeOptions(
        consumer_id=1,
        subscription="live",
        sub_type=SubType.Shared,
        consumer_name="c",
        initial_position=InitialPosition.EARLIEST,
    )
    consumer, sub = await persistent.subscribe(cnx, options)
    sub.consumer_flow(consumer, 100)
    for _ in range(3):
        await persistent.append(_entry(), 2)
    for _ in range(500):
        if len(consumer.pending_acks) == 3:
            break
        await asyncio.sleep(0.005)
    value = _registry(topics, per_topic=True).get_sample_value
    labels = {**TOPIC, "subscription": "live"}
    assert value("pulsar_subscription_unacked_messages", labels) == 6
    assert value("pulsar_consumers_count", TOPIC) == 1
    assert value("pulsar_out_messages_total", TOPIC) == 6


def test_latency_buckets_count_a_value_in_the_first_bound_at_or_above_it() -> None:
    buckets = LatencyBuckets((0.001, 0.01))
    for seconds in (0.0005, 0.001, 0.002, 0.5):
        buckets.observe(seconds)
    assert buckets.counts == [2, 1, 1]
    assert buckets.count == 4
    assert buckets.sum == pytest.approx(0.5035)
