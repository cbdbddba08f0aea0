"""PatternDiscovery: keeps a pattern consumer's topics in step with its
namespace (SEM-1 regex subscriptions).

Every `pattern_auto_discovery_period` seconds it lists the namespace and
subscribes to matching topics that appeared, closing those that are gone.
When the broker offers topic list watchers (and the consumer watches
persistent topics only, as Pulsar's clients do), changes are also pushed
(topic_watcher.py) and applied at once; the periodic listing stays as the
safety net, and a watcher whose connection dropped is set up again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol

from magnetar.client.aio.consumer.topic_watcher import Connect, TopicListWatcher
from magnetar.client.aio.errors import PulsarException
from magnetar.client.aio.log import get_logger
from magnetar.client.aio.tasks import cancel_and_wait

ListTopics = Callable[[], Awaitable[list[str]]]

_log = get_logger("magnetar.client.sync.consumer")


class DiscoveryOwner(Protocol):
    """The pattern consumer whose topics are kept in step."""

    def topic_names(self) -> set[str]: ...
    async def add_topic(self, name: str) -> None: ...
    async def remove_topic(self, name: str) -> None: ...


class PatternDiscovery:
    def __init__(
        self,
        owner: DiscoveryOwner,
        pattern: str,
        list_topics: ListTopics,
        period: float,
        *,
        watch: tuple[str, Connect] | None = None,
    ) -> None:
        """`watch` is (namespace, connect) to use a topic list watcher."""
        self._owner = owner
        self._pattern = pattern
        self._list_topics = list_topics
        self._period = period
        self._connect: Connect | None = None
        self._watcher: TopicListWatcher | None = None
        if watch is not None:
            namespace, self._connect = watch
            self._watcher = TopicListWatcher(namespace, pattern, self._on_update, self._on_lost)
        self._watching = False
        self._changes: list[tuple[list[str], list[str]]] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"pulsar-discovery-{self._pattern}"
        )

    def _on_update(self, new: list[str], deleted: list[str]) -> None:
        self._changes.append((new, deleted))
        self._wake.set()

    def _on_lost(self) -> None:
        self._watching = False
        self._wake.set()

    async def _run(self) -> None:
        while True:
            if self._watcher is not None and not self._watching:
                await self._start_watching()
            timed_out = False
            try:
                await asyncio.wait_for(self._wake.wait(), self._period)
            except TimeoutError:
                timed_out = True
            self._wake.clear()
            changes, self._changes = self._changes, []
            for new, deleted in changes:
                await self._apply(set(new), set(deleted))
            if timed_out:
                await self._poll()

    async def _start_watching(self) -> None:
        assert self._watcher is not None and self._connect is not None
        try:
            snapshot = await self._watcher.watch(self._connect)
        except PulsarException as exc:
            _log.info("topic list watcher failed; polling", pattern=self._pattern, error=str(exc))
            return
        if snapshot is None:  # the broker offers none: polling only
            self._watcher = None
            return
        self._watching = True
        current = set(snapshot)
        known = self._owner.topic_names()
        await self._apply(current - known, known - current)

    async def _poll(self) -> None:
        try:
            current = set(await self._list_topics())
        except PulsarException as exc:
            _log.info("topic discovery failed; next period", pattern=self._pattern, error=str(exc))
            return
        known = self._owner.topic_names()
        await self._apply(current - known, known - current)

    async def _apply(self, new: set[str], deleted: set[str]) -> None:
        known = self._owner.topic_names()
        for name in sorted(new - known):
            try:
                await self._owner.add_topic(name)
                _log.info("pattern consumer added a topic", pattern=self._pattern, topic=name)
            except PulsarException as exc:
                _log.info("subscribing a discovered topic failed", topic=name, error=str(exc))
        for name in sorted(deleted & known):
            await self._owner.remove_topic(name)

    async def close(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
        if self._watcher is not None:
            await self._watcher.close()
