"""TopicListWatcher: the client side of topic list watchers (protocol v20,
Pulsar's PIP-145). A pattern consumer asks the broker to watch its
namespace's persistent topics matching its pattern; the broker answers with
the matching topics now and then pushes each change (WATCH_TOPIC_UPDATE), so
a new topic is picked up at once rather than at the next discovery period.

A broker that does not offer watchers (CONNECTED's supports_topic_watchers
is false) leaves the consumer to its periodic listing, which goes on anyway
as a safety net. When the watcher's connection drops it calls `on_lost`;
its owner watches again on a new connection.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Awaitable, Callable

from magnetar.client.aio.errors import PulsarException
from magnetar.client.aio.net import commands
from magnetar.client.aio.net.connection import ClientConnection
from magnetar.proto import pulsar_api_pb2 as pb

OnUpdate = Callable[[list[str], list[str]], None]
Connect = Callable[[], Awaitable[ClientConnection]]

_watcher_ids = itertools.count(0)


class TopicListWatcher:
    """One watcher on one connection; `watch()` it, then `close()` it."""

    def __init__(
        self, namespace: str, pattern: str, on_update: OnUpdate, on_lost: Callable[[], None]
    ) -> None:
        self.namespace = namespace
        self.pattern = pattern
        self.watcher_id = next(_watcher_ids)
        self.topics_hash = ""
        self._on_update = on_update
        self._on_lost = on_lost
        self._cnx: ClientConnection | None = None

    async def watch(self, connect: Connect) -> list[str] | None:
        """Start watching on a connection from `connect`: the matching topics
        now, or None when the broker offers no watchers."""
        cnx = await connect()
        if not cnx.supports_topic_watchers:
            return None
        cnx.register_watcher(self.watcher_id, self)
        self._cnx = cnx
        request_id = cnx.new_request_id()
        try:
            frame = await cnx.request(
                commands.watch_topic_list(
                    request_id,
                    self.watcher_id,
                    self.namespace,
                    self.pattern,
                    self.topics_hash or None,
                ),
                request_id,
            )
        except BaseException:
            cnx.remove_watcher(self.watcher_id, self)
            self._cnx = None
            raise
        success = frame.command.watchTopicListSuccess
        self.topics_hash = success.topics_hash
        return list(success.topic)

    # -- what the connection calls ------------------------------------------

    def handle_topic_update(self, update: pb.CommandWatchTopicUpdate) -> None:
        self.topics_hash = update.topics_hash
        self._on_update(list(update.new_topics), list(update.deleted_topics))

    def connection_closed(self, cnx: ClientConnection) -> None:
        if cnx is self._cnx:
            self._cnx = None
            self._on_lost()

    async def close(self) -> None:
        """Stop watching (idempotent); the broker is told when still connected."""
        cnx, self._cnx = self._cnx, None
        if cnx is None:
            return
        cnx.remove_watcher(self.watcher_id, self)
        request_id = cnx.new_request_id()
        with contextlib.suppress(PulsarException, TimeoutError):
            await cnx.request(
                commands.watch_topic_list_close(request_id, self.watcher_id),
                request_id,
            )
