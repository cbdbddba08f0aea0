"""PolicyResolver: topic policy, else namespace policy, else broker config,
from one read of each level; writes tell listeners, and a loaded topic gets
the new values without reading policies on its own."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from magnetar.broker.config import BrokerConfig
from magnetar.broker.features.keywindow import KeyWindowPolicy
from magnetar.broker.observability.metrics import BrokerMetrics
from magnetar.broker.policies.backlog_quota import BacklogQuota
from magnetar.broker.policies.rates import DispatchRate, PublishRate
from magnetar.broker.policies.resolver import (
    PolicyChange,
    PolicyDefaults,
    PolicyResolver,
)
from magnetar.broker.resources import PulsarResources, ResourceNotFound
from magnetar.broker.schemas.compatibility import Strategy
from magnetar.broker.service.broker_service import BrokerService
from magnetar.broker.storage import SqliteMetadataStore
from magnetar.broker.storage_setup import open_storage
from magnetar.broker.topics.persistent import PersistentTopic
from magnetar.proto.naming import TopicName

TOPIC = TopicName.parse("persistent://public/default/orders")
DEFAULTS = PolicyDefaults(deduplication_enabled=True, retention=(0.0, 0))


def count_reads(resources: PulsarResources, monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Counts the policy reads made through the real resources."""
    reads: Counter[str] = Counter()
    for method in ("get_policies", "get_topic_policies"):
        real: Callable[..., Awaitable[Any]] = getattr(resources, method)

        def counted(
            *args: Any, _real: Callable[..., Awaitable[Any]] = real, _name: str = method
        ) -> Awaitable[Any]:
            reads[_name] += 1
            return _real(*args)

        monkeypatch.setattr(resources, method, counted)
    return reads


@pytest.fixture
async def resources(tmp_path: Path) -> AsyncIterator[PulsarResources]:
    store = await SqliteMetadataStore.open(str(tmp_path / "m.db"))
    found = PulsarResources(store, "standalone")
    await found.ensure_defaults("pulsar://localhost:6650", "http://localhost:8080")
    yield found
    await store.close()


async def test_one_read_of_each_level(
    resources: PulsarResources, monkeypatch: pytest.MonkeyPatch
) -> None:
    resolver = PolicyResolver(resources, DEFAULTS)
    reads = count_reads(resources, monkeypatch)
    policies = await resolver.resolve(TOPIC)
    # Every value comes from what the resolve read.
    values = (
        policies.deduplication_enabled,
        policies.key_window,
        policies.publish_rate,
        policies.dispatch_rate,
        policies.compaction_threshold,
        policies.retention,
        policies.message_ttl_s,
        policies.backlog_quotas,
        policies.schema_compatibility,
    )
    assert values[-1] is Strategy.FULL
    assert reads == {"get_policies": 1, "get_topic_policies": 1}


async def test_broker_defaults_when_no_level_sets_them(resources: PulsarResources) -> None:
    policies = await PolicyResolver(resources, DEFAULTS).resolve(TOPIC)
    assert policies.deduplication_enabled is True
    assert policies.key_window is None
    assert policies.publish_rate is None and policies.dispatch_rate is None
    assert policies.compaction_threshold == 0
    assert policies.configured_retention is None and policies.retention == (0.0, 0)
    assert policies.message_ttl_s == 0
    assert policies.backlog_quotas.size is None and policies.backlog_quotas.age is None
    assert policies.schema_compatibility is Strategy.FULL


async def test_namespace_over_broker_and_topic_over_namespace(
    resources: PulsarResources,
) -> None:
    resolver = PolicyResolver(resources, DEFAULTS)
    namespace_level: dict[str, object] = {
        "deduplicationEnabled": False,
        "dedupKeyWindow": {"window": "10m"},
        "publishRate": {"publishThrottlingRateInMsg": 10},
        "dispatchRate": {"dispatchThrottlingRateInMsg": 20},
        "compaction_threshold": 1000,
        "schema_compatibility_strategy": "BACKWARD",
        "retention_policies": {"retentionTimeInMinutes": 2, "retentionSizeInMB": -1},
        "message_ttl_in_seconds": 30,
        "backlog_quota_map": {"destination_storage": {"limitSize": 5, "policy": "x"}},
    }
    for key, value in namespace_level.items():
        await resolver.set_namespace_policy("public", "default", key, value)
    policies = await resolver.resolve(TOPIC)
    assert policies.deduplication_enabled is False
    assert policies.key_window == KeyWindowPolicy(600_000)
    assert policies.publish_rate == PublishRate(10)
    assert policies.dispatch_rate == DispatchRate(20)
    assert policies.compaction_threshold == 1000
    assert policies.schema_compatibility is Strategy.BACKWARD
    assert policies.retention == (120.0, -1)
    assert policies.message_ttl_s == 30
    assert policies.backlog_quotas.size == BacklogQuota(5, "x")

    topic_level: dict[str, object] = {
        "deduplicationEnabled": True,
        "dedupKeyWindow": {"window": "1m"},
        "publishRate": {"publishThrottlingRateInMsg": 1},
        "dispatchRate": {"dispatchThrottlingRateInMsg": 2},
        "compactionThreshold": 7,
        "schemaCompatibilityStrategy": "FORWARD",
    }
    for key, value in topic_level.items():
        await resolver.set_topic_policy(TOPIC, key, value)
    # A partition runs with its partitioned topic's policies.
    policies = await resolver.resolve(TOPIC.partition(3))
    assert policies.deduplication_enabled is True
    assert policies.key_window == KeyWindowPolicy(60_000)
    assert policies.publish_rate == PublishRate(1)
    assert policies.dispatch_rate == DispatchRate(2)
    assert policies.compaction_threshold == 7
    assert policies.schema_compatibility is Strategy.FORWARD

    # UNDEFINED at the topic inherits again.
    await resolver.set_topic_policy(TOPIC, "schemaCompatibilityStrategy", "UNDEFINED")
    assert (await resolver.resolve(TOPIC)).schema_compatibility is Strategy.BACKWARD


async def test_values_of_the_wrong_type_fall_through(resources: PulsarResources) -> None:
    resolver = PolicyResolver(resources, DEFAULTS)
    await resolver.set_topic_policy(TOPIC, "deduplicationEnabled", "yes")
    await resolver.set_topic_policy(TOPIC, "compactionThreshold", "big")
    await resolver.set_namespace_policy("public", "default", "compaction_threshold", 5)
    policies = await resolver.resolve(TOPIC)
    assert policies.deduplication_enabled is True  # the broker's
    assert policies.compaction_threshold == 5  # the namespace's


async def test_missing_namespace(resources: PulsarResources) -> None:
    resolver = PolicyResolver(resources, DEFAULTS)
    elsewhere = TopicName.parse("persistent://public/gone/t")
    policies = await resolver.resolve(elsewhere)
    assert policies.namespace is None
    assert policies.deduplication_enabled is True
    assert policies.compaction_threshold == 0
    # The schema strategy asks the namespace, which does not exist.
    with pytest.raises(ResourceNotFound, match="public/gone does not exist"):
        _ = policies.schema_compatibility
    await resources.set_topic_policy(elsewhere, "schemaCompatibilityStrategy", "FULL")
    assert (await resolver.resolve(elsewhere)).schema_compatibility is Strategy.FULL


async def test_writes_tell_listeners(resources: PulsarResources) -> None:
    resolver = PolicyResolver(resources, DEFAULTS)
    heard: list[PolicyChange] = []

    async def listener(change: PolicyChange) -> None:
        heard.append(change)

    resolver.listen(listener)
    await resolver.set_namespace_policy("public", "default", "deduplicationEnabled", True)
    await resolver.set_topic_policy(TOPIC, "deduplicationEnabled", None)
    await resolver.namespace_changed("public", "other")
    assert heard == [
        PolicyChange("public", "default"),
        PolicyChange("public", "default", TOPIC),
        PolicyChange("public", "other"),
    ]
    assert resolver.changes == 3


def test_what_a_change_covers() -> None:
    sibling = TopicName.parse("persistent://public/default/payments")
    namespace = PolicyChange("public", "default")
    assert namespace.covers(TOPIC) and namespace.covers(sibling)
    assert not namespace.covers(TopicName.parse("persistent://public/other/orders"))
    own = PolicyChange("public", "default", TOPIC)
    assert own.covers(TOPIC) and own.covers(TOPIC.partition(1))
    assert not own.covers(sibling)
    assert not own.covers(TopicName.parse("non-persistent://public/default/orders"))


@pytest.fixture
async def service(tmp_path: Path) -> AsyncIterator[BrokerService]:
    config = BrokerConfig(data_dir=tmp_path, sync_policy="none")
    factory, store = await open_storage(config)
    found = BrokerService(config, factory, store, BrokerMetrics())
    await found.start()
    yield found
    await found.close()
    await factory.close()
    await store.close()


def persistent(topic: object) -> PersistentTopic:
    assert isinstance(topic, PersistentTopic)
    return topic


async def test_a_topic_load_reads_each_level_once(
    service: BrokerService, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads = count_reads(service.resources, monkeypatch)
    topic = persistent(await service.get_topic(str(TOPIC)))
    assert reads == {"get_policies": 1, "get_topic_policies": 1}
    assert topic.deduplication is None and topic.compaction.threshold_bytes == 0


async def test_loaded_topics_get_changed_policies(service: BrokerService) -> None:
    topic = persistent(await service.get_topic(str(TOPIC)))
    sibling = persistent(await service.get_topic("persistent://public/default/payments"))
    await service.policies.set_namespace_policy("public", "default", "message_ttl_in_seconds", 60)
    assert topic.message_ttl_s == 60 and sibling.message_ttl_s == 60
    await service.policies.set_topic_policy(TOPIC, "compactionThreshold", 123)
    assert topic.compaction.threshold_bytes == 123
    assert sibling.compaction.threshold_bytes == 0
    await service.policies.set_topic_policy(TOPIC, "compactionThreshold", None)
    assert topic.compaction.threshold_bytes == 0


async def test_a_change_while_a_topic_loads_reaches_it(service: BrokerService) -> None:
    """Whichever way the load and the write interleave, the loaded topic
    ends with the written value."""
    for ttl in range(1, 11):
        name = f"persistent://public/default/loading-{ttl}"
        load = asyncio.get_running_loop().create_task(service.get_topic(name))
        for _ in range(ttl):  # a different point of the load each round
            await asyncio.sleep(0)
        await service.policies.set_namespace_policy(
            "public", "default", "message_ttl_in_seconds", ttl
        )
        assert persistent(await load).message_ttl_s == ttl


async def test_limits_and_schema_validation_levels(resources: PulsarResources) -> None:
    """Limits per topic and schema validation follow the same rule: the
    topic's, else the namespace's (Pulsar's Policies fields), else the
    broker's settings."""
    broker = PolicyDefaults(max_producers=5, schema_validation_enforced=True)
    resolver = PolicyResolver(resources, broker)
    policies = await resolver.resolve(TOPIC)
    assert (policies.max_producers, policies.max_consumers) == (5, 0)
    assert policies.schema_validation_enforced is True
    await resolver.set_namespace_policy("public", "default", "max_producers_per_topic", 2)
    await resolver.set_namespace_policy("public", "default", "max_consumers_per_topic", 3)
    await resolver.set_namespace_policy("public", "default", "max_subscriptions_per_topic", 4)
    await resolver.set_namespace_policy("public", "default", "schema_validation_enforced", False)
    policies = await resolver.resolve(TOPIC)
    assert (policies.max_producers, policies.max_consumers, policies.max_subscriptions) == (2, 3, 4)
    assert policies.schema_validation_enforced is False
    await resolver.set_topic_policy(TOPIC, "maxProducerPerTopic", 1)
    await resolver.set_topic_policy(TOPIC, "schemaValidationEnforced", True)
    policies = await resolver.resolve(TOPIC.partition(0))
    assert policies.max_producers == 1 and policies.schema_validation_enforced is True
