"""Every policy, declared once (issue 43).

A Policy names where Pulsar keeps it (the namespace Policies field, the
topic-policy name), its REST path at each level, how a value is checked and
normalised before it is stored (a bad one is Pulsar's 400 or 412 with a
reason), what GET answers when a level does not set it, and which broker
setting applies when no level does. From these the admin routes are built
(admin/policy_routes.py), the resolver answers effective values, and the
`magnetar admin` commands address any policy by its REST name.

Checks raise InvalidPolicyValue; they never touch I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from magnetar.broker.features.keywindow import (
    POLICY_KEY as KEY_WINDOW_KEY,
    InvalidPolicy,
    KeyWindowPolicy,
)
from magnetar.broker.policies.backlog_quota import QUOTA_KEY as BACKLOG_QUOTA_NAMESPACE
from magnetar.broker.policies.inactive import DELETE_MODES
from magnetar.broker.policies.rates import (
    DISPATCH_RATE_POLICY,
    PUBLISH_RATE_POLICY,
    DispatchRate,
    InvalidRate,
    PublishRate,
)
from magnetar.broker.policies.subscribe_rate import SUBSCRIBE_RATE_POLICY, SubscribeRate
from magnetar.broker.policies.subscription_rates import SUBSCRIPTION_DISPATCH_RATE_POLICY
from magnetar.broker.schemas.compatibility import Strategy

Check = Callable[[object], object]


class InvalidPolicyValue(ValueError):
    """A value a policy does not take: `status` is Pulsar's (400 for the
    wrong shape, 412 for a value out of range)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Keyed:
    """A policy stored as a map whose entries are set one by one, keyed by a
    query parameter (the backlog quota, by backlogQuotaType)."""

    query: str
    keys: tuple[str, ...]
    default_key: str


@dataclass(frozen=True, slots=True)
class Policy:
    name: str
    check: Check
    # Where it is stored: the namespace Policies field, the topic-policy name.
    namespace_field: str | None = None
    topic_field: str | None = None
    # Its REST path under /namespaces/{tenant}/{namespace}/ and under
    # /{domain}/{tenant}/{namespace}/{topic}/ (None: not at that level).
    namespace_path: str | None = None
    topic_path: str | None = None
    # Keyed policies are read at a path of their own (backlogQuotaMap).
    read_path: str | None = None
    namespace_set: tuple[str, ...] = ("POST",)
    topic_set: tuple[str, ...] = ("POST",)
    # What GET answers where it is not set.
    unset: object = None
    # The PolicyDefaults field that applies when no level sets it.
    default: str | None = None
    keyed: Keyed | None = None


# ------------------------------------------------------------------ checks


def integer(what: str, *, minimum: int = 0) -> Check:
    def check(body: object) -> int:
        if isinstance(body, bool) or not isinstance(body, int):
            raise InvalidPolicyValue(400, f"{what} must be an integer, got {body!r}")
        if body < minimum:
            raise InvalidPolicyValue(412, f"{what} must be at least {minimum}, got {body}")
        return body

    return check


def flag(body: object) -> bool:
    if not isinstance(body, bool):
        raise InvalidPolicyValue(400, f"the body must be true or false, got {body!r}")
    return body


def _object(body: object, what: str) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise InvalidPolicyValue(400, f"{what} must be a JSON object, got {body!r}")
    return body


def _field(body: Mapping[str, Any], key: str, default: object, check: Check) -> object:
    return check(body.get(key, default))


def retention(body: object) -> dict[str, Any]:
    """RetentionPolicies: minutes and MB, -1 meaning unlimited, 0 none."""
    found = _object(body, "retention")
    return {
        key: _field(found, key, 0, integer(key, minimum=-1))
        for key in ("retentionTimeInMinutes", "retentionSizeInMB")
    }


BACKLOG_POLICIES = ("producer_request_hold", "producer_exception", "consumer_backlog_eviction")


def backlog_quota(body: object) -> dict[str, Any]:
    """BacklogQuota: limitSize bytes, limitTime seconds (-1: none), policy."""
    found = _object(body, "a backlog quota")
    policy = found.get("policy", "producer_request_hold")
    if policy not in BACKLOG_POLICIES:
        raise InvalidPolicyValue(
            400, f"policy must be one of {', '.join(BACKLOG_POLICIES)}, got {policy!r}"
        )
    return {
        "limitSize": integer("limitSize", minimum=-1)(
            found.get("limitSize", found.get("limit", -1))
        ),
        "limitTime": integer("limitTime", minimum=-1)(found.get("limitTime", -1)),
        "policy": policy,
    }


def strategy(body: object) -> str | None:
    """A schema compatibility strategy; UNDEFINED removes it (inherit)."""
    try:
        parsed = Strategy.parse(body)
    except ValueError as exc:
        raise InvalidPolicyValue(400, str(exc)) from exc
    return None if parsed is None else parsed.value


def _parsed(parse: Callable[[object], Any], errors: type[Exception]) -> Check:
    def check(body: object) -> object:
        try:
            return parse(body).to_json()
        except errors as exc:
            raise InvalidPolicyValue(400, str(exc)) from exc

    return check


SUBSCRIPTION_TYPES = ("Exclusive", "Shared", "Failover", "Key_Shared")


def subscription_types(body: object) -> list[str]:
    """A set of subscription type names (Pulsar's SubscriptionType)."""
    if not isinstance(body, list) or not all(t in SUBSCRIPTION_TYPES for t in body):
        raise InvalidPolicyValue(
            400, f"the body must be a list of {', '.join(SUBSCRIPTION_TYPES)}, got {body!r}"
        )
    return sorted(set(body), key=SUBSCRIPTION_TYPES.index)


def delayed_delivery(body: object) -> dict[str, Any]:
    """DelayedDeliveryPolicies: active, tickTime (ms), maxDeliveryDelayInMillis
    (0: no limit)."""
    found = _object(body, "delayed delivery policies")
    return {
        "active": flag(found.get("active", True)),
        "tickTime": integer("tickTime", minimum=1)(found.get("tickTime", 1000)),
        "maxDeliveryDelayInMillis": integer("maxDeliveryDelayInMillis")(
            found.get("maxDeliveryDelayInMillis", 0)
        ),
    }


def auto_subscription_creation(body: object) -> dict[str, Any]:
    found = _object(body, "AutoSubscriptionCreationOverride")
    return {"allowAutoSubscriptionCreation": flag(found.get("allowAutoSubscriptionCreation"))}


def inactive_topic_policies(body: object) -> dict[str, Any]:
    """InactiveTopicPolicies; a missing field takes Pulsar's class default."""
    found = _object(body, "inactive topic policies")
    mode = found.get("inactiveTopicDeleteMode", DELETE_MODES[0])
    if mode not in DELETE_MODES:
        raise InvalidPolicyValue(
            400, f"inactiveTopicDeleteMode must be one of {', '.join(DELETE_MODES)}, got {mode!r}"
        )
    return {
        "inactiveTopicDeleteMode": mode,
        "maxInactiveDurationSeconds": integer("maxInactiveDurationSeconds")(
            found.get("maxInactiveDurationSeconds", 0)
        ),
        "deleteWhileInactive": flag(found.get("deleteWhileInactive", False)),
    }


TOPIC_TYPES = ("partitioned", "non-partitioned")


def auto_topic_creation(body: object) -> dict[str, Any]:
    """AutoTopicCreationOverride: a partitioned type needs a partition count."""
    found = _object(body, "AutoTopicCreationOverride")
    allowed = flag(found.get("allowAutoTopicCreation"))
    kind = found.get("topicType", "non-partitioned")
    if kind not in TOPIC_TYPES:
        raise InvalidPolicyValue(412, f"topicType must be one of {TOPIC_TYPES}, got {kind!r}")
    value: dict[str, Any] = {"allowAutoTopicCreation": allowed, "topicType": kind}
    if kind == "partitioned":
        value["defaultNumPartitions"] = integer("defaultNumPartitions", minimum=1)(
            found.get("defaultNumPartitions")
        )
    return value


def cluster_names(body: object) -> list[str]:
    """A namespace's or topic's replication clusters: a non-empty list of
    cluster names (Pulsar's 412 texts). Whether each cluster is registered
    and allowed for the tenant is checked by the admin (admin/replication.py)."""
    if not isinstance(body, list) or not all(isinstance(c, str) for c in body):
        raise InvalidPolicyValue(400, f"the body must be a list of cluster names, got {body!r}")
    if not body:
        raise InvalidPolicyValue(412, "ClusterIds should not be null or empty")
    if "global" in body:
        raise InvalidPolicyValue(412, "Cannot specify global in the list of replication clusters")
    return sorted(set(body))


# ---------------------------------------------------------------- policies

DEDUPLICATION = Policy(
    "deduplication", flag, "deduplicationEnabled", "deduplicationEnabled",
    "deduplication", "deduplicationEnabled", default="deduplication_enabled",
)  # fmt: skip
KEY_WINDOW = Policy(
    "dedup_key_window", _parsed(KeyWindowPolicy.from_json, InvalidPolicy),
    KEY_WINDOW_KEY, KEY_WINDOW_KEY, KEY_WINDOW_KEY, KEY_WINDOW_KEY,
)  # fmt: skip
PUBLISH_RATE = Policy(
    "publish_rate", _parsed(PublishRate.from_json, InvalidRate),
    PUBLISH_RATE_POLICY, PUBLISH_RATE_POLICY, "publishRate", "publishRate",
)  # fmt: skip
DISPATCH_RATE = Policy(
    "dispatch_rate", _parsed(DispatchRate.from_json, InvalidRate),
    DISPATCH_RATE_POLICY, DISPATCH_RATE_POLICY, "dispatchRate", "dispatchRate",
)  # fmt: skip
# Each subscription's own quota (policies/subscription_rates.py). Pulsar keeps
# the namespace's value per cluster; a broker here serves one cluster.
SUBSCRIPTION_DISPATCH_RATE = Policy(
    "subscription_dispatch_rate", _parsed(DispatchRate.from_json, InvalidRate),
    SUBSCRIPTION_DISPATCH_RATE_POLICY, SUBSCRIPTION_DISPATCH_RATE_POLICY,
    "subscriptionDispatchRate", "subscriptionDispatchRate",
)  # fmt: skip
COMPACTION_THRESHOLD = Policy(
    "compaction_threshold", integer("the compaction threshold in bytes"),
    "compaction_threshold", "compactionThreshold", "compactionThreshold", "compactionThreshold",
    namespace_set=("PUT", "POST"), default="compaction_threshold",
)  # fmt: skip
SCHEMA_COMPATIBILITY = Policy(
    "schema_compatibility", strategy,
    "schema_compatibility_strategy", "schemaCompatibilityStrategy",
    "schemaCompatibilityStrategy", "schemaCompatibilityStrategy",
    namespace_set=("PUT", "POST"), topic_set=("PUT", "POST"), unset="UNDEFINED",
)  # fmt: skip
SCHEMA_VALIDATION = Policy(
    "schema_validation_enforced", flag,
    "schema_validation_enforced", "schemaValidationEnforced",
    "schemaValidationEnforced", "schemaValidationEnforced",
    default="schema_validation_enforced",
)  # fmt: skip
RETENTION = Policy(
    "retention", retention, "retention_policies", "retentionPolicies", "retention", "retention",
    default="retention",
)  # fmt: skip
MESSAGE_TTL = Policy(
    "message_ttl", integer("the message TTL in seconds"),
    "message_ttl_in_seconds", "messageTTLInSeconds", "messageTTL", "messageTTL",
)  # fmt: skip
BACKLOG_QUOTA = Policy(
    "backlog_quota", backlog_quota, BACKLOG_QUOTA_NAMESPACE, "backLogQuotaMap",
    "backlogQuota", "backlogQuota", read_path="backlogQuotaMap", unset={},
    keyed=Keyed("backlogQuotaType", ("destination_storage", "message_age"), "destination_storage"),
)  # fmt: skip
MAX_PRODUCERS = Policy(
    "max_producers", integer("maxProducers"),
    "max_producers_per_topic", "maxProducerPerTopic", "maxProducersPerTopic", "maxProducers",
    default="max_producers",
)  # fmt: skip
MAX_CONSUMERS = Policy(
    "max_consumers", integer("maxConsumers"),
    "max_consumers_per_topic", "maxConsumerPerTopic", "maxConsumersPerTopic", "maxConsumers",
    default="max_consumers",
)  # fmt: skip
MAX_SUBSCRIPTIONS = Policy(
    "max_subscriptions", integer("maxSubscriptionsPerTopic"),
    "max_subscriptions_per_topic", "maxSubscriptionsPerTopic",
    "maxSubscriptionsPerTopic", "maxSubscriptionsPerTopic", default="max_subscriptions",
)  # fmt: skip
MAX_CONSUMERS_PER_SUBSCRIPTION = Policy(
    "max_consumers_per_subscription", integer("maxConsumersPerSubscription"),
    "max_consumers_per_subscription", "maxConsumersPerSubscription",
    "maxConsumersPerSubscription", "maxConsumersPerSubscription",
)  # fmt: skip
SUBSCRIPTION_TYPES_ENABLED = Policy(
    "subscription_types_enabled", subscription_types,
    "subscription_types_enabled", "subscriptionTypesEnabled",
    "subscriptionTypesEnabled", "subscriptionTypesEnabled",
)  # fmt: skip
DELAYED_DELIVERY = Policy(
    "delayed_delivery", delayed_delivery,
    "delayed_delivery_policies", "delayedDeliveryPolicies", "delayedDelivery", "delayedDelivery",
)  # fmt: skip
MAX_MESSAGE_SIZE = Policy(
    "max_message_size", integer("maxMessageSize"), None, "maxMessageSize", None, "maxMessageSize",
)  # fmt: skip
AUTO_SUBSCRIPTION_CREATION = Policy(
    "auto_subscription_creation", auto_subscription_creation,
    "autoSubscriptionCreationOverride", "autoSubscriptionCreationOverride",
    "autoSubscriptionCreation", "autoSubscriptionCreation",
)  # fmt: skip
AUTO_TOPIC_CREATION = Policy(
    "auto_topic_creation", auto_topic_creation,
    "autoTopicCreationOverride", None, "autoTopicCreation", None,
)  # fmt: skip

MAX_TOPICS_PER_NAMESPACE = Policy(
    "max_topics_per_namespace", integer("maxTopicsPerNamespace"),
    "max_topics_per_namespace", None, "maxTopicsPerNamespace", None,
)  # fmt: skip
ENCRYPTION_REQUIRED = Policy(
    "encryption_required", flag, "encryption_required", None, "encryptionRequired", None,
)  # fmt: skip
# Pulsar's is_allow_auto_update_schema; true unless a namespace says false
# (Pulsar's isAllowAutoUpdateSchemaEnabled defaults to true).
ALLOW_AUTO_UPDATE_SCHEMA = Policy(
    "allow_auto_update_schema", flag, "is_allow_auto_update_schema", None,
    "isAllowAutoUpdateSchema", None, unset=True, default="allow_auto_update_schema",
)  # fmt: skip
# 0: no limit (Pulsar's "must be 0 or more" is a 412).
MAX_UNACKED_ON_CONSUMER = Policy(
    "max_unacked_on_consumer", integer("maxUnackedMessagesPerConsumer"),
    "max_unacked_messages_per_consumer", "maxUnackedMessagesOnConsumer",
    "maxUnackedMessagesPerConsumer", "maxUnackedMessagesOnConsumer",
    default="max_unacked_on_consumer",
)  # fmt: skip
MAX_UNACKED_ON_SUBSCRIPTION = Policy(
    "max_unacked_on_subscription", integer("maxUnackedMessagesPerSubscription"),
    "max_unacked_messages_per_subscription", "maxUnackedMessagesOnSubscription",
    "maxUnackedMessagesPerSubscription", "maxUnackedMessagesOnSubscription",
    default="max_unacked_on_subscription",
)  # fmt: skip
# Enforced by the expiry sweep (service/inactivity.py).
INACTIVE_TOPIC_POLICIES = Policy(
    "inactive_topic_policies", inactive_topic_policies,
    "inactive_topic_policies", "inactiveTopicPolicies",
    "inactiveTopicPolicies", "inactiveTopicPolicies", default="inactive_topic_policies",
)  # fmt: skip
# Minutes, 0: never; namespace level only in Pulsar's admin API.
SUBSCRIPTION_EXPIRATION_TIME = Policy(
    "subscription_expiration_time", integer("the subscription expiration time in minutes"),
    "subscription_expiration_time_minutes", None, "subscriptionExpirationTime", None,
)  # fmt: skip
# Pulsar keeps the namespace's value per cluster (Policies.clusterSubscribeRate,
# keyed by cluster name); a broker here serves one cluster, so one field.
SUBSCRIBE_RATE = Policy(
    "subscribe_rate", _parsed(SubscribeRate.from_json, InvalidRate),
    SUBSCRIBE_RATE_POLICY, SUBSCRIBE_RATE_POLICY, "subscribeRate", "subscribeRate",
)  # fmt: skip
DEDUP_SNAPSHOT_INTERVAL = Policy(
    "dedup_snapshot_interval", integer("the deduplication snapshot interval in seconds"),
    "deduplicationSnapshotIntervalSeconds", "deduplicationSnapshotIntervalSeconds",
    "deduplicationSnapshotInterval", "deduplicationSnapshotInterval",
    default="dedup_snapshot_interval_s",
)  # fmt: skip

# Geo-replication (issue 45): the clusters a namespace's topics replicate
# to, Pulsar's Policies.replication_clusters and the topic policy
# replicationClusters; the local cluster is always among them.
REPLICATION_CLUSTERS = Policy(
    "replication_clusters", cluster_names, "replication_clusters", "replicationClusters",
    "replication", "replication", unset=[],
)  # fmt: skip

# What each replicator of a topic may send its remote cluster, Pulsar's
# replicatorDispatchRate (Pulsar keeps the namespace's value per cluster; a
# broker here serves one cluster).
REPLICATOR_DISPATCH_RATE = Policy(
    "replicator_dispatch_rate", _parsed(DispatchRate.from_json, InvalidRate),
    "replicatorDispatchRate", "replicatorDispatchRate",
    "replicatorDispatchRate", "replicatorDispatchRate",
)  # fmt: skip

POLICIES: tuple[Policy, ...] = (
    DEDUPLICATION,
    KEY_WINDOW,
    PUBLISH_RATE,
    DISPATCH_RATE,
    SUBSCRIPTION_DISPATCH_RATE,
    REPLICATOR_DISPATCH_RATE,
    COMPACTION_THRESHOLD,
    SCHEMA_COMPATIBILITY,
    SCHEMA_VALIDATION,
    RETENTION,
    MESSAGE_TTL,
    BACKLOG_QUOTA,
    MAX_PRODUCERS,
    MAX_CONSUMERS,
    MAX_SUBSCRIPTIONS,
    MAX_CONSUMERS_PER_SUBSCRIPTION,
    SUBSCRIPTION_TYPES_ENABLED,
    DELAYED_DELIVERY,
    MAX_MESSAGE_SIZE,
    AUTO_SUBSCRIPTION_CREATION,
    AUTO_TOPIC_CREATION,
    MAX_TOPICS_PER_NAMESPACE,
    ENCRYPTION_REQUIRED,
    ALLOW_AUTO_UPDATE_SCHEMA,
    MAX_UNACKED_ON_CONSUMER,
    MAX_UNACKED_ON_SUBSCRIPTION,
    INACTIVE_TOPIC_POLICIES,
    SUBSCRIPTION_EXPIRATION_TIME,
    SUBSCRIBE_RATE,
    DEDUP_SNAPSHOT_INTERVAL,
    REPLICATION_CLUSTERS,
)
