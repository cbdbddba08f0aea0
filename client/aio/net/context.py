"""ClientContext: what producers and consumers share inside one client.

The pool, the lookup service, timeouts, id generators and the registry of
open endpoints (so closing the client closes them all).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from magnetar.client.aio.errors import PulsarException, Timeout
from magnetar.client.aio.net.backoff import Backoff
from magnetar.client.aio.net.connection import ClientConnection
from magnetar.client.aio.net.lookup import LookupService
from magnetar.client.aio.net.pool import ConnectionPool
from magnetar.proto.naming import TopicName

R = TypeVar("R")


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

    async def retrying(
        self, what: str, operation: Callable[[], Awaitable[R]], stop: Callable[[], bool]
    ) -> R:
        """Retry a lookup-style operation on retriable errors until the operation
        timeout, or until `stop` says the caller is closing."""
        deadline = time.monotonic() + self.operation_timeout
        backoff = self.new_backoff()
        while True:
            try:
                return await operation()
            except PulsarException as exc:
                remaining = deadline - time.monotonic()
                if not exc.retriable or stop():
                    raise
                if remaining <= 0:
                    raise Timeout(
                        f"{what}: gave up after {self.operation_timeout}s: {exc}"
                    ) from exc
                await asyncio.sleep(min(backoff.next(), remaining))
