"""PolicyResolver: the policies a topic runs with, by Pulsar's one rule
"topic policy, else namespace policy, else broker config".

`resolve` reads the topic's own policies and its namespace's policies once
each; the TopicPolicies it returns answers every effective value from those
two documents. Policy writes go through the resolver too, which tells its
listeners what changed (the service applies the new values to the loaded
topics the change covers) instead of anyone polling or re-reading.

Values are parsed when asked for, not at resolve time: a stored value that
does not parse fails the feature that uses it, and only that one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from magnetar.broker.features.keywindow import POLICY_KEY as KEY_WINDOW_POLICY, KeyWindowPolicy
from magnetar.broker.policies.backlog_quota import BacklogQuotas
from magnetar.broker.policies.rates import (
    DISPATCH_RATE_POLICY,
    PUBLISH_RATE_POLICY,
    DispatchRate,
    PublishRate,
)
from magnetar.broker.schemas.compatibility import DEFAULT_STRATEGY, Strategy
from magnetar.broker.service.resources import PulsarResources, ResourceNotFound
from magnetar.proto.naming import TopicName

# Pulsar's names: the same at both levels unless two are given
# (namespace Policies field, topic-policy name).
DEDUPLICATION_POLICY = "deduplicationEnabled"
COMPACTION_THRESHOLD_NAMESPACE = "compaction_threshold"
COMPACTION_THRESHOLD_TOPIC = "compactionThreshold"
SCHEMA_STRATEGY_NAMESPACE = "schema_compatibility_strategy"
SCHEMA_STRATEGY_TOPIC = "schemaCompatibilityStrategy"
# Limits per topic (0: none) and schema validation: Pulsar's namespace
# Policies fields and topic-policy names.
MAX_PRODUCERS_NAMESPACE, MAX_PRODUCERS_TOPIC = "max_producers_per_topic", "maxProducerPerTopic"
MAX_CONSUMERS_NAMESPACE, MAX_CONSUMERS_TOPIC = "max_consumers_per_topic", "maxConsumerPerTopic"
MAX_SUBSCRIPTIONS_NAMESPACE = "max_subscriptions_per_topic"
MAX_SUBSCRIPTIONS_TOPIC = "maxSubscriptionsPerTopic"
SCHEMA_VALIDATION_NAMESPACE = "schema_validation_enforced"
SCHEMA_VALIDATION_TOPIC = "schemaValidationEnforced"
# Namespace-only here (Magnetar has no topic-level retention, TTL or quota).
RETENTION_POLICY = "retention_policies"
TTL_POLICY = "message_ttl_in_seconds"


T = TypeVar("T")


def retention_of(policies: Mapping[str, Any]) -> tuple[float, int] | None:
    """(seconds, bytes) from RetentionPolicies; -1 stays "unlimited"."""
    body = policies.get(RETENTION_POLICY)
    if not isinstance(body, dict):
        return None
    minutes = int(body.get("retentionTimeInMinutes", 0))
    megabytes = int(body.get("retentionSizeInMB", 0))
    return (
        -1.0 if minutes < 0 else minutes * 60.0,
        -1 if megabytes < 0 else megabytes * 1024 * 1024,
    )


def ttl_of(policies: Mapping[str, Any]) -> int:
    value = policies.get(TTL_POLICY)
    return value if isinstance(value, int) and value > 0 else 0


def policies_owner(topic: TopicName) -> str:
    """The topic whose policies `topic` runs with: partitions share their
    partitioned topic's."""
    return str(topic.partitioned_base if topic.partition_index >= 0 else topic)


@dataclass(frozen=True, slots=True)
class PolicyDefaults:
    """The broker config's values, where neither level sets a policy."""

    deduplication_enabled: bool = False
    # (seconds, bytes) of the broker's managed ledger config.
    retention: tuple[float, int] = (0.0, 0)
    schema_compatibility: Strategy = DEFAULT_STRATEGY
    # Pulsar's default: no automatic compaction.
    compaction_threshold: int = 0
    max_producers: int = 0
    max_consumers: int = 0
    max_subscriptions: int = 0
    schema_validation_enforced: bool = False


@dataclass(frozen=True, slots=True)
class TopicPolicies:
    """One topic's policies as read once: its own and its namespace's."""

    name: TopicName
    topic: Mapping[str, Any]
    # None when the namespace does not exist.
    namespace: Mapping[str, Any] | None
    defaults: PolicyDefaults

    def _body(self, key: str) -> object:
        """A policy's stored body: the topic's, else the namespace's, else None."""
        body = self.topic.get(key)
        if body is None and self.namespace is not None:
            body = self.namespace.get(key)
        return body

    @property
    def _namespace(self) -> Mapping[str, Any]:
        return {} if self.namespace is None else self.namespace

    def _first_of(self, kind: type[T], topic_key: str, namespace_key: str, default: T) -> T:
        """The topic's value, else the namespace's, else `default`; a stored
        value of another type counts as unset."""
        for level, key in ((self.topic, topic_key), (self._namespace, namespace_key)):
            value = level.get(key)
            if isinstance(value, kind):
                return value
        return default

    @property
    def deduplication_enabled(self) -> bool:
        return self._first_of(
            bool, DEDUPLICATION_POLICY, DEDUPLICATION_POLICY, self.defaults.deduplication_enabled
        )

    @property
    def key_window(self) -> KeyWindowPolicy | None:
        body = self._body(KEY_WINDOW_POLICY)
        return None if body is None else KeyWindowPolicy.from_json(body)

    @property
    def publish_rate(self) -> PublishRate | None:
        body = self._body(PUBLISH_RATE_POLICY)
        return None if body is None else PublishRate.from_json(body)

    @property
    def dispatch_rate(self) -> DispatchRate | None:
        body = self._body(DISPATCH_RATE_POLICY)
        return None if body is None else DispatchRate.from_json(body)

    @property
    def compaction_threshold(self) -> int:
        """Bytes published before compaction starts by itself."""
        return self._first_of(
            int,
            COMPACTION_THRESHOLD_TOPIC,
            COMPACTION_THRESHOLD_NAMESPACE,
            self.defaults.compaction_threshold,
        )

    @property
    def max_producers(self) -> int:
        return self._first_of(
            int, MAX_PRODUCERS_TOPIC, MAX_PRODUCERS_NAMESPACE, self.defaults.max_producers
        )

    @property
    def max_consumers(self) -> int:
        return self._first_of(
            int, MAX_CONSUMERS_TOPIC, MAX_CONSUMERS_NAMESPACE, self.defaults.max_consumers
        )

    @property
    def max_subscriptions(self) -> int:
        return self._first_of(
            int,
            MAX_SUBSCRIPTIONS_TOPIC,
            MAX_SUBSCRIPTIONS_NAMESPACE,
            self.defaults.max_subscriptions,
        )

    @property
    def schema_validation_enforced(self) -> bool:
        return self._first_of(
            bool,
            SCHEMA_VALIDATION_TOPIC,
            SCHEMA_VALIDATION_NAMESPACE,
            self.defaults.schema_validation_enforced,
        )

    @property
    def namespace_retention(self) -> tuple[float, int] | None:
        """The namespace's retention; None when it sets none."""
        return retention_of(self._namespace)

    @property
    def retention(self) -> tuple[float, int]:
        return self.namespace_retention or self.defaults.retention

    @property
    def message_ttl_s(self) -> int:
        return ttl_of(self._namespace)

    @property
    def backlog_quotas(self) -> BacklogQuotas:
        return BacklogQuotas.from_policies(self._namespace)

    @property
    def schema_compatibility(self) -> Strategy:
        """ResourceNotFound when the topic sets none and its namespace does
        not exist (the schema calls answer that as before)."""
        parsed = Strategy.parse(self.topic.get(SCHEMA_STRATEGY_TOPIC))
        if parsed is None:
            if self.namespace is None:
                ns = f"{self.name.tenant}/{self.name.namespace}"
                raise ResourceNotFound(f"namespace {ns} does not exist")
            parsed = Strategy.parse(self.namespace.get(SCHEMA_STRATEGY_NAMESPACE))
        return parsed or self.defaults.schema_compatibility


@dataclass(frozen=True, slots=True)
class PolicyChange:
    """Policies that changed: a namespace's, or one topic's own (`topic`)."""

    tenant: str
    namespace: str
    topic: TopicName | None = None

    def covers(self, name: TopicName) -> bool:
        """Whether `name` may run with other policies after this change."""
        if (name.tenant, name.namespace) != (self.tenant, self.namespace):
            return False
        return self.topic is None or policies_owner(name) == policies_owner(self.topic)


PolicyListener = Callable[[PolicyChange], Awaitable[None]]


class PolicyResolver:
    def __init__(self, resources: PulsarResources, defaults: PolicyDefaults) -> None:
        self._resources = resources
        self.defaults = defaults
        self._listeners: list[PolicyListener] = []
        # Counts changes told: a topic still loading (not yet told of them)
        # compares it before and after to know it must resolve again.
        self.changes = 0

    async def resolve(self, topic: TopicName) -> TopicPolicies:
        own = await self._resources.get_topic_policies(topic)
        try:
            namespace: Mapping[str, Any] | None = await self._resources.get_policies(
                topic.tenant, topic.namespace
            )
        except ResourceNotFound:
            namespace = None
        return TopicPolicies(topic, own, namespace, self.defaults)

    # ------------------------------------------------------------ changes

    def listen(self, listener: PolicyListener) -> None:
        self._listeners.append(listener)

    async def set_namespace_policy(
        self, tenant: str, namespace: str, key: str, value: object
    ) -> None:
        """Set (None: remove) one namespace policy; listeners hear of it."""
        await self._resources.set_policy(tenant, namespace, key, value)
        await self.namespace_changed(tenant, namespace)

    async def set_topic_policy(self, topic: TopicName, key: str, value: object) -> None:
        """Set (None: remove, to inherit again) one topic policy."""
        await self._resources.set_topic_policy(topic, key, value)
        await self._changed(PolicyChange(topic.tenant, topic.namespace, topic))

    async def namespace_changed(self, tenant: str, namespace: str) -> None:
        """Policies of the namespace (or of a topic in it) changed elsewhere,
        e.g. through another broker of the cluster."""
        await self._changed(PolicyChange(tenant, namespace))

    async def _changed(self, change: PolicyChange) -> None:
        self.changes += 1
        for listener in list(self._listeners):
            await listener(change)
