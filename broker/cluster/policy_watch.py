"""Policies changed through another broker reach this broker's loaded topics.

An admin call applies a namespace or topic policy to the topics loaded on
the broker that served it; in a cluster the topics may be loaded elsewhere.
Every member watches the policy keys in etcd and refreshes the namespace's
loaded topics when one changes (its own changes too: refreshing is
idempotent).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import aetcd
import aetcd.exceptions
import structlog

from magnetar.broker.resources import POLICIES, TOPIC_POLICIES

log = structlog.get_logger(__name__)

Refresh = Callable[[str, str], Awaitable[None]]


class PolicyWatcher:
    def __init__(self, client: aetcd.Client, key: Callable[[str], bytes], refresh: Refresh):
        self._client = client
        self._prefixes = [key(POLICIES) + b"/", key(TOPIC_POLICIES) + b"/"]
        self._refresh = refresh
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._watch(prefix), name="cluster-policy-watch")
            for prefix in self._prefixes
        ]

    async def _watch(self, prefix: bytes) -> None:
        delay = 0.2
        while True:
            try:
                watch = await self._client.watch_prefix(prefix)
                try:
                    async for event in watch:
                        delay = 0.2
                        parts = event.kv.key[len(prefix) :].decode().split("/")
                        if len(parts) >= 2:
                            await self._refresh(parts[0], parts[1])
                finally:
                    await watch.cancel()
            except aetcd.exceptions.ClientError as exc:
                log.warning("policy watch failed; watching again", error=repr(exc))
            except Exception:
                log.exception("applying a changed policy failed")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
