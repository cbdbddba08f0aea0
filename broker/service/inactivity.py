"""Deleting what stays idle: inactive topics (inactiveTopicPolicies) and
inactive subscriptions (subscriptionExpirationTime), as Pulsar's periodic
checkGC / checkInactiveSubscriptions do.

The expiry sweep (expiry.py) runs `InactivitySweep.check` on its injected
clock. A topic or subscription counts as idle from the first sweep that sees
it idle; anything that happened in between (a producer or consumer that came
and left between two sweeps) shows as a changed activity counter on the
topic or subscription and starts its idle time again. Only idle candidates
have their policies resolved, so busy topics cost one look at their
producers and consumers per sweep.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable, Iterable
from typing import Protocol

import structlog

from magnetar.broker.errors import BrokerServiceError
from magnetar.broker.features.replicated import is_replication_name
from magnetar.broker.policies.inactive import SUBSCRIPTIONS_CAUGHT_UP, InactiveTopicPolicy
from magnetar.broker.storage.api import StorageError
from magnetar.broker.topics.base import StoredTopic, Topic, is_persistent
from magnetar.proto.naming import TopicName

log = structlog.get_logger(__name__)


class InactivityPolicies(Protocol):
    """What the sweep reads of a topic's resolved policies (resolver.TopicPolicies)."""

    @property
    def inactive_topic_policy(self) -> InactiveTopicPolicy: ...

    @property
    def subscription_expiration_minutes(self) -> int: ...


class IdleTimes:
    """When each key was first seen idle, and its activity signature then: a
    different signature means it was active in between."""

    def __init__(self) -> None:
        self._seen: dict[Hashable, tuple[Hashable, float]] = {}

    def idle_for(self, key: Hashable, signature: Hashable, now: float) -> float:
        seen = self._seen.get(key)
        if seen is None or seen[0] != signature:
            self._seen[key] = (signature, now)
            return 0.0
        return now - seen[1]

    def keep_only(self, keys: set[Hashable]) -> None:
        """Forget what this sweep did not see idle (active again, or gone)."""
        for key in [k for k in self._seen if k not in keys]:
            del self._seen[key]

    def __len__(self) -> int:
        return len(self._seen)


def _has_consumers(topic: Topic) -> bool:
    return any(sub.consumers for sub in topic.subscriptions.values())


def topic_signature(topic: Topic) -> Hashable:
    """Changes whenever a producer or consumer of the topic leaves."""
    return (topic.activity, tuple((n, s.activity) for n, s in topic.subscriptions.items()))


def _caught_up(topic: StoredTopic) -> bool:
    """Every durable subscription (open or only stored) has no backlog; a
    reader's subscription goes with its consumer."""
    for name in topic.subscription_names():
        cursor = topic.ledger.get_cursor(name)
        if cursor is not None and cursor.backlog_entries > 0:
            return False
    return True


def _replicating(topic: StoredTopic) -> bool:
    """A replication cursor has a backlog: a remote cluster still lacks
    entries, which deleting the topic would lose (issue 45)."""
    return any(is_replication_name(c.name) and c.backlog_entries for c in topic.ledger.cursors)


def topic_is_inactive(topic: Topic, mode: str) -> bool:
    """Pulsar's !isActive(mode): no producers, no consumers and, by the
    mode, no subscriptions at all or none with a backlog. A non-persistent
    topic's subscriptions live only while they have consumers. A topic whose
    entries have not all reached its remote clusters stays."""
    if topic.producers or _has_consumers(topic):
        return False
    if not is_persistent(topic):
        return True
    if _replicating(topic):
        return False
    if mode == SUBSCRIPTIONS_CAUGHT_UP:
        return _caught_up(topic)
    return not topic.subscription_names()


def idle_subscriptions(topic: StoredTopic) -> list[str]:
    """Durable subscriptions without consumers (open or only stored)."""
    idle = [n for n, s in topic.subscriptions.items() if s.is_durable and not s.consumers]
    idle.extend(c.name for c in topic.idle_cursors())
    return idle


def subscription_signature(topic: StoredTopic, name: str) -> Hashable:
    sub = topic.subscriptions.get(name)
    # A stored cursor nobody opened since the topic loaded has no counter.
    return None if sub is None else (id(sub), sub.activity)


class InactivitySweep:
    """The two checks; `delete_topic` is the admin DELETE's path (it refuses,
    ConsumerBusy, a topic that got a producer or consumer meanwhile)."""

    def __init__(
        self,
        resolve: Callable[[TopicName], Awaitable[InactivityPolicies]],
        delete_topic: Callable[[str], Awaitable[None]],
    ) -> None:
        self._resolve = resolve
        self._delete_topic = delete_topic
        self.idle_topics = IdleTimes()
        self.idle_subscriptions = IdleTimes()

    async def check(self, topics: Iterable[Topic], now: float) -> None:
        seen_topics: set[Hashable] = set()
        seen_subs: set[Hashable] = set()
        for topic in list(topics):
            if topic.is_closed:
                continue
            subs = idle_subscriptions(topic) if is_persistent(topic) else []
            quiet = not topic.producers and not _has_consumers(topic)
            if not subs and not quiet:
                continue
            try:
                policies = await self._resolve(topic.topic_name)
                if subs and is_persistent(topic):
                    await self._expire_subscriptions(topic, subs, policies, now, seen_subs)
                if quiet and await self._check_topic(topic, policies, now):
                    seen_topics.add(topic.name)
            except Exception as exc:  # the periodic sweep outlives one topic's failure
                log.warning("inactivity check failed", topic=topic.name, error=repr(exc))
        self.idle_topics.keep_only(seen_topics)
        self.idle_subscriptions.keep_only(seen_subs)

    async def _check_topic(self, topic: Topic, policies: InactivityPolicies, now: float) -> bool:
        """Delete the topic once idle long enough; whether it is still idle."""
        policy = policies.inactive_topic_policy
        if not policy.delete_while_inactive or not topic_is_inactive(topic, policy.delete_mode):
            return False
        idle = self.idle_topics.idle_for(topic.name, topic_signature(topic), now)
        if idle < policy.max_inactive_s:
            return True
        log.info("deleting inactive topic", topic=topic.name, idle_s=round(idle, 1))
        # Partitions go one by one; the partitioned topic's metadata stays, as
        # with Pulsar's default (brokerDeleteInactivePartitionedTopicMetadataEnabled
        # off): a client may publish to it again.
        await self._delete_topic(topic.name)
        return False

    async def _expire_subscriptions(
        self,
        topic: StoredTopic,
        names: list[str],
        policies: InactivityPolicies,
        now: float,
        seen: set[Hashable],
    ) -> None:
        minutes = policies.subscription_expiration_minutes
        if minutes <= 0:
            return
        for name in names:
            key = (topic.name, name)
            idle = self.idle_subscriptions.idle_for(key, subscription_signature(topic, name), now)
            if idle < minutes * 60:
                seen.add(key)
                continue
            log.info("deleting inactive subscription", topic=topic.name, subscription=name)
            try:
                await topic.delete_subscription(name)
            except (BrokerServiceError, StorageError) as exc:
                # A consumer came back (ConsumerBusy) or the cursor is gone.
                log.info("inactive subscription kept", subscription=name, error=str(exc))
