"""IncomingQueue: received messages waiting for the application (SEM-2.3).

A deque with waiters, shared by whoever feeds it: a single-topic Consumer,
or a multi-topic consumer whose partition consumers feed one queue. `get`
and `get_batch` wait on the running loop's clock; `close(error)` wakes every
waiter with that error.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterator

from magnetar.client.aio.errors import PulsarException, Timeout
from magnetar.client.aio.message import Message
from magnetar.client.aio.policies import BatchReceivePolicy

# Sizes count payload bytes, as the official client's byte limits do.
_data_of = Message.data


class IncomingQueue:
    def __init__(self) -> None:
        self._items: deque[Message] = deque()
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._bytes = 0
        self._error: Callable[[], PulsarException] | None = None

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Message]:
        """The queued messages, oldest first, left in place."""
        return iter(self._items)

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def put(self, msg: Message) -> None:
        self._items.append(msg)
        self._bytes += len(msg.data())
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                break

    def put_many(self, messages: list[Message]) -> None:
        """Queue the messages of one entry at once."""
        self._items.extend(messages)
        self._bytes += sum(map(len, map(_data_of, messages)))
        wake = len(messages)
        while wake and self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():  # a cancelled receive left its waiter behind
                waiter.set_result(None)
                wake -= 1

    def get_nowait(self) -> Message | None:
        if not self._items:
            return None
        msg = self._items.popleft()
        self._bytes -= len(msg.data())
        return msg

    def take_queued(self, max_messages: int, max_bytes: int) -> list[Message]:
        """What is queued now, oldest first, up to `max_messages` and until
        `max_bytes` of values are reached (the message that reaches it is
        included); no waiting."""
        items, size = self._items, 0
        out: list[Message] = []
        while items and len(out) < max_messages and size < max_bytes:
            msg = items.popleft()
            out.append(msg)
            size += len(msg.data())
        self._bytes -= size
        return out

    def clear(self) -> list[Message]:
        items = list(self._items)
        self._items.clear()
        self._bytes = 0
        return items

    def close(self, error: Callable[[], PulsarException]) -> None:
        """From now on an empty queue raises error() instead of waiting."""
        self._error = error
        self.wake_all()

    def reopen(self) -> None:
        self._error = None

    def wake_all(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)

    async def _wait(self, deadline: float | None, loop: asyncio.AbstractEventLoop) -> bool:
        """Wait for a put; False when the deadline passed first."""
        if self._error is not None:
            raise self._error()
        waiter = loop.create_future()
        self._waiters.append(waiter)
        if deadline is None:
            await waiter
            return True
        remaining = deadline - loop.time()
        if remaining <= 0:
            return False
        try:
            async with asyncio.timeout(remaining):
                await waiter
        except TimeoutError:
            return False
        return True

    async def get(self, timeout_millis: int | None = None) -> Message:
        """The next message; Timeout after `timeout_millis` without one."""
        msg = self.get_nowait()
        if msg is not None:
            return msg
        loop = asyncio.get_running_loop()
        deadline = None if timeout_millis is None else loop.time() + timeout_millis / 1000
        while True:
            msg = self.get_nowait()
            if msg is not None:
                return msg
            if not await self._wait(deadline, loop):
                raise Timeout(f"no message within {timeout_millis} ms")

    async def get_batch(self, policy: BatchReceivePolicy) -> list[Message]:
        """Messages until the count or byte limit, or whatever came by the timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + policy.timeout_ms / 1000 if policy.timeout_ms > 0 else None
        out: list[Message] = []
        size = 0
        items = self._items
        while True:
            limit = policy.max_num_message
            if items and not out and not (0 < policy.max_num_bytes < self._bytes):
                # Everything queued fits the byte limit: up to the count in one step.
                count = len(items) if limit <= 0 else min(limit, len(items))
                if count == len(items):
                    out = list(items)
                    items.clear()
                else:
                    out = [items.popleft() for _ in range(count)]
                size = sum(map(len, map(_data_of, out)))
                self._bytes -= size
                if count == limit or 0 < policy.max_num_bytes <= size:
                    return out
            while self._items:
                nxt = self._items[0]
                if out and 0 < policy.max_num_bytes < size + len(nxt.data()):
                    return out
                msg = self.get_nowait()
                assert msg is not None
                out.append(msg)
                size += len(msg.data())
                if 0 < policy.max_num_message <= len(out):
                    return out
                if 0 < policy.max_num_bytes <= size:
                    return out
            if not await self._wait(deadline, loop):
                return out
