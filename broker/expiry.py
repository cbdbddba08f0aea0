"""Namespace retention and message TTL, enforced (SEMANTICS retention / TTL).

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
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import structlog

from magnetar.broker.backlog_quota import BacklogQuota
from magnetar.broker.storage.api import StorageError
from magnetar.broker.topics.persistent import PersistentTopic

log = structlog.get_logger(__name__)

RETENTION_KEY = "retention_policies"
TTL_KEY = "message_ttl_in_seconds"


def retention_of(policies: Mapping[str, Any]) -> tuple[float, int] | None:
    """(seconds, bytes) from RetentionPolicies; -1 stays "unlimited"."""
    body = policies.get(RETENTION_KEY)
    if not isinstance(body, dict):
        return None
    minutes = int(body.get("retentionTimeInMinutes", 0))
    megabytes = int(body.get("retentionSizeInMB", 0))
    return (
        -1.0 if minutes < 0 else minutes * 60.0,
        -1 if megabytes < 0 else megabytes * 1024 * 1024,
    )


def ttl_of(policies: Mapping[str, Any]) -> int:
    value = policies.get(TTL_KEY)
    return value if isinstance(value, int) and value > 0 else 0


def apply_operations_policies(
    topic: object, policies: Mapping[str, Any], default_retention: tuple[float, int]
) -> None:
    """Give a persistent topic its namespace's retention, TTL and backlog quota
    (non-persistent topics store nothing: none applies)."""
    if not isinstance(topic, PersistentTopic):
        return
    topic.ledger.set_retention(*(retention_of(policies) or default_retention))
    topic.message_ttl_s = ttl_of(policies)
    topic.backlog_quota = BacklogQuota.from_policies(policies)


async def expire_topic(topic: PersistentTopic, now_s: float) -> None:
    """Expire, on every subscription, messages older than the topic's TTL."""
    ttl = topic.message_ttl_s
    if ttl <= 0 or topic.is_closed:
        return
    cutoff_ms = int((now_s - ttl) * 1000)
    for name in topic.subscription_names():
        sub = await topic.get_subscription(name)
        await sub.expire_messages(cutoff_ms)


class ExpiryMonitor:
    """The periodic sweep: TTL expiry, backlog eviction, then a trim (time-based
    retention)."""

    def __init__(
        self,
        topics: Callable[[], Iterable[object]],
        interval_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._topics = topics
        self._interval = interval_s
        self._clock = clock
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def sweep(self) -> None:
        now = self._clock()
        for topic in list(self._topics()):
            if not isinstance(topic, PersistentTopic) or topic.is_closed:
                continue
            try:
                await expire_topic(topic, now)
                await topic.evict_backlog()
                await topic.ledger.trim_consumed_ledgers()
            except StorageError as exc:
                log.warning("expiry sweep failed", topic=topic.name, error=str(exc))

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            await self.sweep()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
