"""Namespace retention and message TTL, enforced (SEMANTICS retention / TTL);
the same sweep then deletes inactive topics and subscriptions (inactivity.py).

Retention goes to each topic's managed ledger (trim.py deletes consumed
ledgers past it); TTL expires messages for every subscription by moving its
mark-delete past entries published more than TTL seconds ago, the same
move as the admin's expire-messages. A periodic sweep runs both, on an
injected clock so tests need not wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterable

import structlog

from magnetar.broker.service.inactivity import InactivitySweep
from magnetar.broker.storage.api import StorageError
from magnetar.broker.topics.base import StoredTopic, Topic, is_persistent

log = structlog.get_logger(__name__)


async def expire_topic(topic: StoredTopic, now_s: float) -> None:
    """Expire, on every subscription, messages older than the topic's TTL."""
    ttl = topic.message_ttl_s
    if ttl <= 0 or topic.is_closed:
        return
    cutoff_ms = int((now_s - ttl) * 1000)
    for name in topic.subscription_names():
        sub = await topic.get_subscription(name)
        await sub.expire_messages(cutoff_ms)


class ExpiryMonitor:
    """Two periodic sweeps, as Pulsar runs them: TTL expiry then a trim
    (time-based retention) every ``interval_s``; the backlog quota check
    (eviction, or disconnecting producers of a topic over a blocking quota)
    every ``quota_interval_s``."""

    def __init__(
        self,
        topics: Callable[[], Iterable[Topic]],
        interval_s: float,
        clock: Callable[[], float] = time.time,
        quota_interval_s: float = 60.0,
        inactivity: InactivitySweep | None = None,
    ) -> None:
        self._topics = topics
        self._interval = interval_s
        self._quota_interval = quota_interval_s
        # Public: integration tests move it forward (subscription expiry
        # counts in minutes).
        self.clock = clock
        # Inactive topics and subscriptions, deleted at the end of each sweep.
        self.inactivity = inactivity
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._every(self._interval, self.sweep)),
            loop.create_task(self._every(self._quota_interval, self.check_backlog_quotas)),
        ]

    def _persistent_topics(self) -> list[StoredTopic]:
        return [t for t in list(self._topics()) if is_persistent(t) and not t.is_closed]

    async def sweep(self) -> None:
        now = self.clock()
        for topic in self._persistent_topics():
            try:
                await expire_topic(topic, now)
                await topic.ledger.trim_consumed_ledgers()
            except StorageError as exc:
                log.warning("expiry sweep failed", topic=topic.name, error=str(exc))
        if self.inactivity is not None:
            await self.inactivity.check(self._topics(), now)

    async def check_backlog_quotas(self) -> None:
        now = self.clock()
        for topic in self._persistent_topics():
            try:
                await topic.quota.measure_age(topic.ledger, now)
                await topic.evict_backlog(now)
                # Eviction may have freed whole ledgers.
                await topic.ledger.trim_consumed_ledgers()
            except StorageError as exc:
                log.warning("backlog quota check failed", topic=topic.name, error=str(exc))
            topic.disconnect_producers_over_quota()

    @staticmethod
    async def _every(interval_s: float, job: Callable[[], Awaitable[None]]) -> None:
        while True:
            await asyncio.sleep(interval_s)
            await job()

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
