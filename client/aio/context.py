"""ClientContext: what producers and consumers share inside one client.

The pool, the lookup service, timeouts, id generators and the registry of
open endpoints (so closing the client closes them all).
"""

from __future__ import annotations

import itertools
from typing import Protocol

from magnetar.client.aio.net.backoff import Backoff
from magnetar.client.aio.net.connection import ClientConnection
from magnetar.client.aio.net.lookup import LookupService
from magnetar.client.aio.net.pool import ConnectionPool
from magnetar.proto.naming import TopicName


class Closeable(Protocol):
    async def close(self) -> None: ...


class ClientContext:
    def __init__(
        self,
        pool: ConnectionPool,
        lookup: LookupService,
        *,
        operation_timeout: float,
        backoff_initial: float = 0.1,
        backoff_max: float = 30.0,
    ) -> None:
        self.pool = pool
        self.lookup = lookup
        self.operation_timeout = operation_timeout
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.producer_ids = itertools.count(0)
        self.consumer_ids = itertools.count(0)
        self.endpoints: set[Closeable] = set()
        self.closed = False

    def new_backoff(self) -> Backoff:
        return Backoff(self.backoff_initial, self.backoff_max)

    async def connection_for(self, topic: TopicName) -> ClientConnection:
        """A connection to the broker that serves `topic` (after a lookup)."""
        address = await self.lookup.get_broker(topic)
        return await self.pool.get_connection(address)
