"""Give a loaded topic its effective policies (resolver.TopicPolicies).

The order is the one the broker has always applied them in: a value that
does not parse stops the ones after it.
"""

from __future__ import annotations

from magnetar.broker.policies.resolver import TopicPolicies
from magnetar.broker.topics.base import Topic, is_persistent
from magnetar.broker.topics.topic_producers import PublishLimits


def apply_operations_policies(topic: Topic, policies: TopicPolicies) -> None:
    """Retention, TTL and backlog quota: persistent topics only (a
    non-persistent topic stores nothing for them to act on)."""
    if not is_persistent(topic):
        return
    topic.ledger.set_retention(*policies.retention)
    topic.message_ttl_s = policies.message_ttl_s
    topic.quota.quotas = policies.backlog_quotas


async def apply_policies(topic: Topic, policies: TopicPolicies) -> None:
    apply_operations_policies(topic, policies)
    await topic.set_deduplication(policies.deduplication_enabled)
    await topic.set_key_window(policies.key_window)
    topic.set_publish_rate(policies.publish_rate)
    topic.set_dispatch_rate(policies.dispatch_rate)
    topic.set_subscription_dispatch_rates(policies.subscription_dispatch_rates)
    topic.set_compaction_threshold(policies.compaction_threshold)
    active, max_delay_ms = policies.delayed_delivery
    topic.set_delayed_delivery(active)
    topic.set_publish_limits(PublishLimits(policies.max_message_size, max_delay_ms))
    topic.set_auto_subscription_creation(policies.allow_auto_subscription_creation)
    topic.set_unacked_limits(*policies.unacked_limits)
    topic.set_subscribe_rate(policies.subscribe_rate)
    topic.set_dedup_snapshot_interval(policies.dedup_snapshot_interval_s)
