"""ListenerRunner: hands a consumer's messages to its message_listener, one at a time.

The listener is called as listener(consumer, message); an awaitable result is
awaited before the next message (so the blocking facade can run the listener
on its own thread). pause() stops handing messages out after the current one;
messages keep queueing (and permits stop being freed) until resume().
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from magnetar.client.aio.errors import PulsarException
from magnetar.client.aio.log import get_logger
from magnetar.client.aio.message import Message
from magnetar.client.aio.tasks import cancel_and_wait

_log = get_logger("magnetar.client.sync.consumer")


class ListenerRunner:
    def __init__(
        self,
        consumer: Any,
        listener: Callable[[Any, Any], Any],
        next_message: Callable[[], Awaitable[Message]],
    ) -> None:
        self._consumer = consumer
        self._listener = listener
        self._next = next_message
        self._running = asyncio.Event()
        self._running.set()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._loop(), name="pulsar-message-listener"
            )

    def pause(self) -> None:
        self._running.clear()

    def resume(self) -> None:
        self._running.set()

    @property
    def paused(self) -> bool:
        return not self._running.is_set()

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)

    async def _loop(self) -> None:
        while True:
            await self._running.wait()
            try:
                msg = await self._next()
            except PulsarException:
                return  # the consumer closed
            # Paused while this one was awaited: it waits for resume too.
            await self._running.wait()
            try:
                result = self._listener(self._consumer, msg)
                if inspect.isawaitable(result):
                    await result
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the application's bug: log, keep consuming
                _log.exception("message listener raised", error=str(exc))
