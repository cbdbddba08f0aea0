"""Topic list watchers (protocol v20, Pulsar's PIP-145): a client watches the
persistent topics of a namespace that match a pattern and is told when one
appears or goes, instead of polling GET_TOPICS_OF_NAMESPACE.

The broker keeps, per watcher, the list it last told the client. Whatever
changes a namespace's topics (a topic created, a partitioned topic created,
grown or deleted, a topic deleted) calls `namespace_changed`; one refresh per
namespace then lists the topics again and sends each watcher the difference.
Listing again rather than tracking events one by one keeps the lists exact
whatever the order of events; a change that alters nothing (a stored topic
loaded again after a restart) sends nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

import structlog

from magnetar.broker.service.topic_list import filter_topics, topics_hash

log = structlog.get_logger(__name__)

ListTopics = Callable[[str], Awaitable[list[str]]]


class WatcherConnection(Protocol):
    """Where a watcher's updates go (the server connection)."""

    def watch_topic_update(
        self, watcher_id: int, new: list[str], deleted: list[str], digest: str
    ) -> None: ...


class InvalidPattern(ValueError):
    """The watcher's pattern is not a valid regex."""


@dataclass(eq=False, slots=True)
class TopicListWatcher:
    cnx: WatcherConnection
    watcher_id: int
    namespace: str
    pattern: str
    topics: set[str] = field(default_factory=set)


class TopicListWatchers:
    """Every watcher of this broker; owns the refresh tasks."""

    def __init__(self, list_topics: ListTopics) -> None:
        self._list_topics = list_topics
        self._by_namespace: dict[str, list[TopicListWatcher]] = {}
        self._refreshing: dict[str, asyncio.Task[None]] = {}
        self._again: set[str] = set()
        # Changes seen per namespace: a watcher compares the count before and
        # after its first listing, so a topic that appears while it lists is
        # not missed (its change came before the watcher was registered).
        self._changes: dict[str, int] = {}

    async def watch(
        self, cnx: WatcherConnection, watcher_id: int, namespace: str, pattern: str
    ) -> tuple[list[str], str]:
        """Register a watcher; the matching topics now and their hash. A
        watcher id the connection uses already is replaced (a re-watch)."""
        self.close(cnx, watcher_id)
        changes = self._changes.get(namespace, 0)
        matching = filter_topics(await self._list_topics(namespace), pattern)
        if matching is None:
            raise InvalidPattern(f"the topics pattern {pattern!r} is not a valid regex")
        watcher = TopicListWatcher(cnx, watcher_id, namespace, pattern, set(matching))
        self._by_namespace.setdefault(namespace, []).append(watcher)
        if self._changes.get(namespace, 0) != changes:
            # The refresh task runs after the caller has answered the watch,
            # so the client gets the success first and the difference next.
            self.namespace_changed(namespace)
        return sorted(matching), topics_hash(matching)

    def close(self, cnx: WatcherConnection, watcher_id: int) -> bool:
        for namespace, watchers in self._by_namespace.items():
            for watcher in watchers:
                if watcher.cnx is cnx and watcher.watcher_id == watcher_id:
                    watchers.remove(watcher)
                    if not watchers:
                        del self._by_namespace[namespace]
                    return True
        return False

    def connection_closed(self, cnx: WatcherConnection) -> None:
        for namespace in list(self._by_namespace):
            kept = [w for w in self._by_namespace[namespace] if w.cnx is not cnx]
            if kept:
                self._by_namespace[namespace] = kept
            else:
                del self._by_namespace[namespace]

    def namespace_changed(self, namespace: str) -> None:
        """Schedule a refresh of the namespace's watchers (coalesced: a change
        during a refresh runs one more)."""
        self._changes[namespace] = self._changes.get(namespace, 0) + 1
        if namespace not in self._by_namespace:
            return
        if namespace in self._refreshing:
            self._again.add(namespace)
            return
        task = asyncio.get_running_loop().create_task(self._refresh(namespace))
        self._refreshing[namespace] = task

    async def _refresh(self, namespace: str) -> None:
        try:
            while True:
                self._again.discard(namespace)
                try:
                    topics = await self._list_topics(namespace)
                except Exception as exc:  # the namespace went, or storage failed
                    log.info("topic watcher refresh failed", namespace=namespace, error=str(exc))
                    topics = []
                for watcher in list(self._by_namespace.get(namespace, ())):
                    self._tell(watcher, topics)
                if namespace not in self._again:
                    return
        finally:
            self._refreshing.pop(namespace, None)

    @staticmethod
    def _tell(watcher: TopicListWatcher, topics: list[str]) -> None:
        current = set(filter_topics(topics, watcher.pattern) or ())
        new = sorted(current - watcher.topics)
        deleted = sorted(watcher.topics - current)
        if not new and not deleted:
            return
        watcher.topics = current
        watcher.cnx.watch_topic_update(
            watcher.watcher_id, new, deleted, topics_hash(sorted(current))
        )

    async def stop(self) -> None:
        tasks = list(self._refreshing.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._by_namespace.clear()
