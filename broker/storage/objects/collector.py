"""RoundCollector: deletes the round objects that no committed extent names.

A round object is shared by every ledger written in its round; it becomes
garbage when the last extent naming it is gone (its ledgers trimmed or
deleted), or when the broker died between its PUT and its commit. The rule
that keeps this safe whatever moment a broker dies at:

- an object is deleted only when a listing of every extent, taken after the
  object listing, names it nowhere, and it is older than ``grace_s``;
- a round whose extents are not committed within ``grace_s / 2`` of its PUT
  is given up by its journal (its producers get an error, never a receipt),
  so no extent naming an object older than ``grace_s`` can appear later.

Every broker of a cluster may run one: deleting is idempotent and each
applies the same rule.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import structlog

from magnetar.broker.storage.api import MetadataStore, StorageError
from magnetar.broker.storage.objects.extents import (
    EXTENTS_ROOT,
    ExtentFormatError,
    key_of_node,
)
from magnetar.broker.storage.objects.journal import COMMIT_DEADLINE_S, ROUNDS_PREFIX
from magnetar.broker.storage.objects.sealer import LEDGERS_PREFIX
from magnetar.broker.storage.objects.store import ObjectStore

log = structlog.get_logger(__name__)

DEFAULT_GRACE_S = 2 * COMMIT_DEADLINE_S
DEFAULT_INTERVAL_S = 300.0


class RoundCollector:
    """Owns one background task (``start``), cancelled and awaited by ``close``."""

    def __init__(
        self,
        objects: ObjectStore,
        meta: MetadataStore,
        *,
        grace_s: float = DEFAULT_GRACE_S,
        interval_s: float = DEFAULT_INTERVAL_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.objects = objects
        self.meta = meta
        self.grace_s = grace_s
        self.interval_s = interval_s
        self._clock = clock
        self._task: asyncio.Task[None] | None = None
        self.deleted = 0

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._loop(), name="object-round-collector"
            )

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait([task])

    async def collect_once(self) -> int:
        """One pass; returns the number of objects deleted."""
        # Objects first, extents second: an extent committed between the two
        # listings is seen (it can only name an object younger than grace).
        listed = await self.objects.list_objects(ROUNDS_PREFIX)
        # Ledger objects too: a seal that died before its commit leaves one.
        listed += await self.objects.list_objects(LEDGERS_PREFIX)
        live = await self.live_keys()
        cutoff = self._clock() - self.grace_s
        dead = [o.key for o in listed if o.key not in live and o.modified < cutoff]
        for i in range(0, len(dead), 500):
            await self.objects.delete(dead[i : i + 500])
        if dead:
            log.info("deleted round objects no extent names", objects=len(dead))
        self.deleted += len(dead)
        return len(dead)

    async def live_keys(self) -> set[str]:
        """Every object key a committed extent names (names only: no reads)."""
        live: set[str] = set()
        meta = self.meta
        for topic in await meta.get_children(EXTENTS_ROOT):
            topic_path = f"{EXTENTS_ROOT}/{topic}"
            for ledger in await meta.get_children(topic_path):
                for node in await meta.get_children(f"{topic_path}/{ledger}"):
                    try:
                        live.add(key_of_node(node))
                    except ExtentFormatError:
                        # Unreadable: keep everything rather than guess.
                        raise StorageError(f"extent {topic_path}/{ledger}/{node}") from None
        return live

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.collect_once()
            except StorageError as exc:
                log.warning("round collection failed; next pass later", error=str(exc))
