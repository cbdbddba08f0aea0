"""What the command handlers need from the connection that owns them.

ServerCnx implements it; the producer and consumer handlers are written
against this protocol, so neither imports the connection (no cycle).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, Protocol

from structlog.typing import FilteringBoundLogger

from magnetar.broker.endpoint import ClientConnection
from magnetar.broker.service.broker_service import BrokerService


class CommandContext(ClientConnection, Protocol):
    @property
    def service(self) -> BrokerService: ...

    @property
    def log(self) -> FilteringBoundLogger: ...

    @property
    def is_closed(self) -> bool: ...

    # Who the client authenticated as (None: not authenticated).
    role: str | None

    def watch_topic_update(
        self, watcher_id: int, new: list[str], deleted: list[str], digest: str
    ) -> None:
        """Tell a topic list watcher of topics that appeared or went."""
        ...

    def write(self, frame: bytes) -> None:
        """Queue one encoded frame (no-op once closed)."""
        ...

    def spawn(
        self, coro: Coroutine[Any, Any, None], request_id: int, what: str, eager: bool = False
    ) -> asyncio.Task[None] | None:
        """Run a request that waits; a BrokerServiceError it raises becomes an
        ERROR frame for `request_id`. `eager`: run it now, up to its first
        wait (broker/eager.py), rather than in a task from the next turn.
        The task that runs it on; None when it finished at once."""
        ...

    async def authorize(self, action: str, topic: str, denied: str = "") -> None:
        """AuthorizationError unless the client's role may `action`
        ("produce", "consume", "lookup") on the topic."""
        ...

    def throttle_reading(self, seconds: float) -> None:
        """Stop reading this connection for `seconds` (a publish rate limit)."""
        ...

    def publish_started(self, size: int) -> None:
        """One more publish of `size` bytes awaits its receipt (reading pauses
        above the count or byte limit)."""
        ...
