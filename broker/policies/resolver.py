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

from magnetar.broker.features.keywindow import KeyWindowPolicy
from magnetar.broker.policies import catalog
from magnetar.broker.policies.backlog_quota import QUOTA_KEY, BacklogQuotas
from magnetar.broker.policies.catalog import Policy
from magnetar.broker.policies.inactive import (
    BROKER_DEFAULT as NO_INACTIVE_DELETION,
    InactiveTopicPolicy,
)
from magnetar.broker.policies.rates import DispatchRate, PublishRate
from magnetar.broker.policies.subscribe_rate import SubscribeRate
from magnetar.broker.policies.subscription_rates import (
    SUBSCRIPTION_POLICIES,
    SubscriptionDispatchRates,
    subscription_overrides,
)
from magnetar.broker.resources import PulsarResources, ResourceNotFound
from magnetar.broker.schemas.compatibility import DEFAULT_STRATEGY, Strategy
from magnetar.proto.naming import TopicName

T = TypeVar("T")


def retention_of(body: object) -> tuple[float, int] | None:
    """(seconds, bytes) from RetentionPolicies; -1 stays "unlimited"."""
    if not isinstance(body, dict):
        return None
    minutes = int(body.get("retentionTimeInMinutes", 0))
    megabytes = int(body.get("retentionSizeInMB", 0))
    return (
        -1.0 if minutes < 0 else minutes * 60.0,
        -1 if megabytes < 0 else megabytes * 1024 * 1024,
    )


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
    allow_auto_subscription_creation: bool = True
    allow_auto_update_schema: bool = True
    # maxUnackedMessagesPerConsumer / PerSubscription (0: none; Pulsar's
    # defaults are 50000 / 200000, set from the broker config).
    max_unacked_on_consumer: int = 0
    max_unacked_on_subscription: int = 0
    # Off, unlike Pulsar's (brokerDeleteInactiveTopicsEnabled); see config.py.
    inactive_topic_policies: InactiveTopicPolicy = NO_INACTIVE_DELETION
    # Seconds between time-based dedup snapshots, 0: by entry count only
    # (Pulsar's brokerDeduplicationSnapshotIntervalSeconds, 120).
    dedup_snapshot_interval_s: int = 120


@dataclass(frozen=True, slots=True)
class TopicPolicies:
    """One topic's policies as read once: its own and its namespace's."""

    name: TopicName
    topic: Mapping[str, Any]
    # None when the namespace does not exist.
    namespace: Mapping[str, Any] | None
    defaults: PolicyDefaults

    def stored(self, policy: Policy) -> object:
        """The policy's stored value: the topic's, else the namespace's, else
        None. A keyed policy merges the two maps, the topic's entries first."""
        own = self.topic.get(policy.topic_field) if policy.topic_field else None
        namespace = self._namespace.get(policy.namespace_field) if policy.namespace_field else None
        if policy.keyed is not None and (isinstance(own, dict) or isinstance(namespace, dict)):
            return {
                **(namespace if isinstance(namespace, dict) else {}),
                **(own if isinstance(own, dict) else {}),
            }
        return namespace if own is None else own

    def applied(self, policy: Policy) -> object:
        """What the topic runs with, as the REST `applied=true` answers it:
        the stored value, else the broker's, else what GET gives unset."""
        value = self.stored(policy)
        if value is None and policy.default is not None:
            value = getattr(self.defaults, policy.default)
            if isinstance(value, Strategy):
                value = value.value
            elif isinstance(value, InactiveTopicPolicy):
                value = value.to_json()
            elif policy is catalog.RETENTION:
                seconds, size = self.defaults.retention
                value = {
                    "retentionTimeInMinutes": -1 if seconds < 0 else int(seconds // 60),
                    "retentionSizeInMB": -1 if size < 0 else size // (1024 * 1024),
                }
        return policy.unset if value is None else value

    @property
    def _namespace(self) -> Mapping[str, Any]:
        return {} if self.namespace is None else self.namespace

    def _typed(self, kind: type[T], policy: Policy, default: T) -> T:
        """The topic's value, else the namespace's, else `default`; a stored
        value of another type counts as unset."""
        for level, key in (
            (self.topic, policy.topic_field),
            (self._namespace, policy.namespace_field),
        ):
            value = level.get(key) if key else None
            if isinstance(value, kind) and (kind is not int or not isinstance(value, bool)):
                return value
        return default

    def _object(self, policy: Policy) -> dict[str, Any] | None:
        return self._typed(dict, policy, None)

    @property
    def deduplication_enabled(self) -> bool:
        return self._typed(bool, catalog.DEDUPLICATION, self.defaults.deduplication_enabled)

    @property
    def key_window(self) -> KeyWindowPolicy | None:
        body = self.stored(catalog.KEY_WINDOW)
        return None if body is None else KeyWindowPolicy.from_json(body)

    @property
    def publish_rate(self) -> PublishRate | None:
        body = self.stored(catalog.PUBLISH_RATE)
        return None if body is None else PublishRate.from_json(body)

    @property
    def dispatch_rate(self) -> DispatchRate | None:
        body = self.stored(catalog.DISPATCH_RATE)
        return None if body is None else DispatchRate.from_json(body)

    @property
    def replicator_dispatch_rate(self) -> DispatchRate | None:
        body = self.stored(catalog.REPLICATOR_DISPATCH_RATE)
        return None if body is None else DispatchRate.from_json(body)

    @property
    def subscription_dispatch_rates(self) -> SubscriptionDispatchRates:
        """subscriptionDispatchRate, and the subscriptions' own rates (kept
        in the topic's subscriptionPolicies), which win for them."""
        body = self.stored(catalog.SUBSCRIPTION_DISPATCH_RATE)
        return SubscriptionDispatchRates(
            None if body is None else DispatchRate.from_json(body),
            subscription_overrides(self.topic.get(SUBSCRIPTION_POLICIES)),
        )

    @property
    def subscribe_rate(self) -> SubscribeRate | None:
        body = self.stored(catalog.SUBSCRIBE_RATE)
        return None if body is None else SubscribeRate.from_json(body)

    @property
    def dedup_snapshot_interval_s(self) -> int:
        """Seconds between time-based dedup snapshots (0: none)."""
        value = self._typed(
            int, catalog.DEDUP_SNAPSHOT_INTERVAL, self.defaults.dedup_snapshot_interval_s
        )
        return max(value, 0)

    @property
    def compaction_threshold(self) -> int:
        """Bytes published before compaction starts by itself."""
        return self._typed(int, catalog.COMPACTION_THRESHOLD, self.defaults.compaction_threshold)

    @property
    def max_producers(self) -> int:
        return self._typed(int, catalog.MAX_PRODUCERS, self.defaults.max_producers)

    @property
    def max_consumers(self) -> int:
        return self._typed(int, catalog.MAX_CONSUMERS, self.defaults.max_consumers)

    @property
    def max_subscriptions(self) -> int:
        return self._typed(int, catalog.MAX_SUBSCRIPTIONS, self.defaults.max_subscriptions)

    @property
    def max_consumers_per_subscription(self) -> int:
        return self._typed(int, catalog.MAX_CONSUMERS_PER_SUBSCRIPTION, 0)

    @property
    def unacked_limits(self) -> tuple[int, int]:
        """(per consumer, per subscription) unacked messages allowed, 0: any."""
        defaults = self.defaults
        per_consumer = self._typed(
            int, catalog.MAX_UNACKED_ON_CONSUMER, defaults.max_unacked_on_consumer
        )
        per_subscription = self._typed(
            int, catalog.MAX_UNACKED_ON_SUBSCRIPTION, defaults.max_unacked_on_subscription
        )
        return max(per_consumer, 0), max(per_subscription, 0)

    @property
    def max_message_size(self) -> int:
        """Bytes (0: the broker's limit alone)."""
        return self._typed(int, catalog.MAX_MESSAGE_SIZE, 0)

    @property
    def schema_validation_enforced(self) -> bool:
        return self._typed(
            bool, catalog.SCHEMA_VALIDATION, self.defaults.schema_validation_enforced
        )

    @property
    def subscription_types_enabled(self) -> frozenset[str] | None:
        """The subscription types allowed (None: all)."""
        found = self._typed(list, catalog.SUBSCRIPTION_TYPES_ENABLED, [])
        return frozenset(found) if found else None

    @property
    def delayed_delivery(self) -> tuple[bool, int]:
        """(active, the longest delay allowed in ms, 0: any)."""
        body = self._object(catalog.DELAYED_DELIVERY) or {}
        return bool(body.get("active", True)), int(body.get("maxDeliveryDelayInMillis", 0))

    @property
    def allow_auto_subscription_creation(self) -> bool:
        body = self._object(catalog.AUTO_SUBSCRIPTION_CREATION)
        if body is None:
            return self.defaults.allow_auto_subscription_creation
        return bool(body.get("allowAutoSubscriptionCreation"))

    @property
    def auto_topic_creation(self) -> dict[str, Any] | None:
        """The namespace's AutoTopicCreationOverride (None: the broker's)."""
        return self._object(catalog.AUTO_TOPIC_CREATION)

    @property
    def max_topics_per_namespace(self) -> int:
        return self._typed(int, catalog.MAX_TOPICS_PER_NAMESPACE, 0)

    @property
    def encryption_required(self) -> bool:
        return self._typed(bool, catalog.ENCRYPTION_REQUIRED, False)

    @property
    def allow_auto_update_schema(self) -> bool:
        """Whether a client's new schema may be registered (else only the
        admin registers schemas)."""
        return self._typed(
            bool, catalog.ALLOW_AUTO_UPDATE_SCHEMA, self.defaults.allow_auto_update_schema
        )

    @property
    def inactive_topic_policy(self) -> InactiveTopicPolicy:
        body = self._object(catalog.INACTIVE_TOPIC_POLICIES)
        if body is None:
            return self.defaults.inactive_topic_policies
        return InactiveTopicPolicy.from_json(body)

    @property
    def subscription_expiration_minutes(self) -> int:
        """Minutes a durable subscription may stay without consumers (0: ever)."""
        return max(self._typed(int, catalog.SUBSCRIPTION_EXPIRATION_TIME, 0), 0)

    @property
    def replication_clusters(self) -> frozenset[str]:
        """The clusters the topic replicates to (the topic's list, else the
        namespace's; the local cluster among them or not)."""
        found = self._typed(list, catalog.REPLICATION_CLUSTERS, [])
        return frozenset(c for c in found if isinstance(c, str))

    @property
    def configured_retention(self) -> tuple[float, int] | None:
        """The topic's or namespace's retention; None when neither sets one."""
        return retention_of(self.stored(catalog.RETENTION))

    @property
    def retention(self) -> tuple[float, int]:
        return self.configured_retention or self.defaults.retention

    @property
    def message_ttl_s(self) -> int:
        value = self._typed(int, catalog.MESSAGE_TTL, 0)
        return max(value, 0)

    @property
    def backlog_quotas(self) -> BacklogQuotas:
        return BacklogQuotas.from_policies({QUOTA_KEY: self.stored(catalog.BACKLOG_QUOTA)})

    @property
    def schema_compatibility(self) -> Strategy:
        """ResourceNotFound when the topic sets none and its namespace does
        not exist (the schema calls answer that as before)."""
        policy = catalog.SCHEMA_COMPATIBILITY
        parsed = Strategy.parse(self.topic.get(policy.topic_field or ""))
        if parsed is None:
            if self.namespace is None:
                ns = f"{self.name.tenant}/{self.name.namespace}"
                raise ResourceNotFound(f"namespace {ns} does not exist")
            parsed = Strategy.parse(self.namespace.get(policy.namespace_field or ""))
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
