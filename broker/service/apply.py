"""Give a loaded topic its effective policies (resolver.TopicPolicies).

The values are resolved first, all of them (a value that does not parse
fails the whole application, and the topic keeps what it had), then handed
to the topic's setters in the order the broker has always applied them.

Topics without policies of their own share the values of their namespace:
resolving them took about 6% of a new topic's creation (fifteen small
parsers, each cold in the loop's cache; issue 43), and a namespace change
re-applies them to every loaded topic of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from magnetar.broker.features.keywindow import KeyWindowPolicy
from magnetar.broker.policies.backlog_quota import BacklogQuotas
from magnetar.broker.policies.rates import DispatchRate, PublishRate
from magnetar.broker.policies.resolver import PolicyDefaults, TopicPolicies
from magnetar.broker.policies.subscribe_rate import SubscribeRate
from magnetar.broker.policies.subscription_rates import SubscriptionDispatchRates
from magnetar.broker.topics.base import Topic, is_persistent
from magnetar.broker.topics.topic_producers import PublishLimits

# Namespaces whose shared values are kept at most (then all are dropped).
_SHARED_LIMIT = 10_000


@dataclass(frozen=True, slots=True)
class AppliedPolicies:
    """The resolved values apply_policies gives a topic (all immutable, so
    topics may share one)."""

    retention: tuple[float, int]
    message_ttl_s: int
    backlog_quotas: BacklogQuotas
    deduplication_enabled: bool
    key_window: KeyWindowPolicy | None
    publish_rate: PublishRate | None
    dispatch_rate: DispatchRate | None
    subscription_dispatch_rates: SubscriptionDispatchRates
    compaction_threshold: int
    delayed_delivery: tuple[bool, int]
    max_message_size: int
    allow_auto_subscription_creation: bool
    unacked_limits: tuple[int, int]
    subscribe_rate: SubscribeRate | None
    dedup_snapshot_interval_s: int

    @classmethod
    def of(cls, p: TopicPolicies) -> AppliedPolicies:
        return cls(
            p.retention,
            p.message_ttl_s,
            p.backlog_quotas,
            p.deduplication_enabled,
            p.key_window,
            p.publish_rate,
            p.dispatch_rate,
            p.subscription_dispatch_rates,
            p.compaction_threshold,
            p.delayed_delivery,
            p.max_message_size,
            p.allow_auto_subscription_creation,
            p.unacked_limits,
            p.subscribe_rate,
            p.dedup_snapshot_interval_s,
        )


class SharedPolicies:
    """The values of topics that set no policy of their own, one per
    namespace: kept while the namespace's policies and the broker's defaults
    are the ones they were resolved from (compared, not trusted to be told)."""

    def __init__(self) -> None:
        self._by_namespace: dict[
            str, tuple[Mapping[str, Any] | None, PolicyDefaults, AppliedPolicies]
        ] = {}

    def of(self, policies: TopicPolicies) -> AppliedPolicies:
        if policies.topic:
            return AppliedPolicies.of(policies)
        key = policies.name.namespace_name
        kept = self._by_namespace.get(key)
        if kept is not None and kept[1] is policies.defaults and kept[0] == policies.namespace:
            return kept[2]
        applied = AppliedPolicies.of(policies)
        if len(self._by_namespace) >= _SHARED_LIMIT:
            self._by_namespace.clear()
        # The resolver reads a namespace's policies afresh for each topic:
        # nothing else holds this map, so the one kept here cannot change.
        self._by_namespace[key] = (policies.namespace, policies.defaults, applied)
        return applied


def apply_operations_policies(topic: Topic, applied: AppliedPolicies) -> None:
    """Retention, TTL and backlog quota: persistent topics only (a
    non-persistent topic stores nothing for them to act on)."""
    if not is_persistent(topic):
        return
    topic.ledger.set_retention(*applied.retention)
    topic.message_ttl_s = applied.message_ttl_s
    topic.quota.quotas = applied.backlog_quotas


async def apply_policies(topic: Topic, policies: TopicPolicies, shared: SharedPolicies) -> None:
    applied = shared.of(policies)
    apply_operations_policies(topic, applied)
    await topic.set_deduplication(applied.deduplication_enabled)
    await topic.set_key_window(applied.key_window)
    topic.set_publish_rate(applied.publish_rate)
    topic.set_dispatch_rate(applied.dispatch_rate)
    topic.set_subscription_dispatch_rates(applied.subscription_dispatch_rates)
    topic.set_compaction_threshold(applied.compaction_threshold)
    active, max_delay_ms = applied.delayed_delivery
    topic.set_delayed_delivery(active)
    topic.set_publish_limits(PublishLimits(applied.max_message_size, max_delay_ms))
    topic.set_auto_subscription_creation(applied.allow_auto_subscription_creation)
    topic.set_unacked_limits(*applied.unacked_limits)
    topic.set_subscribe_rate(applied.subscribe_rate)
    topic.set_dedup_snapshot_interval(applied.dedup_snapshot_interval_s)
