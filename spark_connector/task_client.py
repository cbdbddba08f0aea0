"""The client of one Spark task on an executor: the async core
(`magnetar.client.aio`) on an event loop run in the task's own thread.

The blocking client runs its loop in a thread of its own and hands every
message across threads: a coroutine scheduled per read, a queue hand-off and
a permit per send, and the two threads taking turns with the GIL. A task
instead runs the loop for a batch of rows at a time (reading one, or sending
one); what arrives in between (messages, receipts) waits in the socket until
the loop runs again.
"""

from __future__ import annotations

from collections.abc import Coroutine, Mapping
from typing import Any, TypeVar

from magnetar.client import aio
from magnetar.client.sync.loop import new_event_loop

R = TypeVar("R")


async def _client(service_url: str, options: Mapping[str, Any]) -> aio.Client:
    return aio.Client(service_url, **options)


class TaskClient:
    """An event loop and a core client on it; `close()` closes both."""

    def __init__(self, service_url: str, client_options: Mapping[str, Any]) -> None:
        self._loop = new_event_loop()
        try:
            self.client = self.run(_client(service_url, client_options))
        except BaseException:
            self._loop.close()
            raise

    def run(self, coro: Coroutine[Any, Any, R]) -> R:
        """Run the loop until `coro` is done; its result."""
        return self._loop.run_until_complete(coro)

    def close(self) -> None:
        """Close the client (its producers wait for their receipts), then the loop."""
        try:
            self.run(self.client.close())
        finally:
            self._loop.close()
