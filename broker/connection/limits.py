"""Limits on what one client may take: connections in total and per address,
producers, consumers and subscriptions per topic (0 means no limit). A client
over a limit gets a clear error; everyone else is unaffected."""

from __future__ import annotations

from collections import Counter

from magnetar.broker.dispatchers.consumer import sub_type_name
from magnetar.broker.errors import BrokerServiceError, ConsumerBusyError, ProducerBusyError
from magnetar.broker.policies.resolver import TopicPolicies
from magnetar.broker.topics.base import Topic
from magnetar.proto.errors import ServerError


class ConnectionLimiter:
    """Counts open connections by peer address (Pulsar's maxConnections and
    maxConnectionsPerIp)."""

    def __init__(self, max_total: int, max_per_ip: int) -> None:
        self.max_total = max_total
        self.max_per_ip = max_per_ip
        self._total = 0
        self._by_ip: Counter[str] = Counter()

    def admit(self, ip: str) -> str | None:
        """Take a slot for `ip`, or say why not (the caller refuses the connection)."""
        if self.max_total and self._total >= self.max_total:
            return f"the broker has reached its limit of {self.max_total} connections"
        if self.max_per_ip and self._by_ip[ip] >= self.max_per_ip:
            return f"{ip} has reached the limit of {self.max_per_ip} connections per address"
        self._total += 1
        self._by_ip[ip] += 1
        return None

    def release(self, ip: str) -> None:
        self._total -= 1
        self._by_ip[ip] -= 1
        if self._by_ip[ip] <= 0:
            del self._by_ip[ip]


def check_producer_limit(topic: Topic, limit: int) -> None:
    if limit and len(topic.producers) >= limit:
        raise ProducerBusyError(f"topic {topic.name} has reached its limit of {limit} producers")


def check_subscribe(
    topic: Topic, subscription: str, sub_type: int, policies: TopicPolicies
) -> None:
    """Before a SUBSCRIBE: the subscription types the topic allows, its
    consumer and subscription counts, the subscription's consumer count."""
    allowed = policies.subscription_types_enabled
    if allowed is not None and sub_type_name(sub_type) not in allowed:
        raise BrokerServiceError(
            ServerError.NotAllowedError,
            f"topic {topic.name} does not allow {sub_type_name(sub_type)} subscriptions "
            f"(subscriptionTypesEnabled: {', '.join(sorted(allowed))})",
        )
    check_consumer_limits(topic, subscription, policies.max_consumers, policies.max_subscriptions)
    per_subscription = policies.max_consumers_per_subscription
    existing = topic.subscriptions.get(subscription)
    if per_subscription and existing is not None and len(existing.consumers) >= per_subscription:
        raise ConsumerBusyError(
            f"subscription {subscription} on {topic.name} has reached its limit of "
            f"{per_subscription} consumers"
        )


def check_consumer_limits(
    topic: Topic, subscription: str, max_consumers: int, max_subscriptions: int
) -> None:
    """The topic's consumer count, and its subscription count when the
    subscription would be new."""
    subscriptions = topic.subscriptions
    if max_consumers and sum(len(s.consumers) for s in subscriptions.values()) >= max_consumers:
        raise ConsumerBusyError(
            f"topic {topic.name} has reached its limit of {max_consumers} consumers"
        )
    new = subscription not in subscriptions
    if max_subscriptions and new and len(subscriptions) >= max_subscriptions:
        raise BrokerServiceError(
            ServerError.NotAllowedError,
            f"topic {topic.name} has reached its limit of {max_subscriptions} subscriptions",
        )
