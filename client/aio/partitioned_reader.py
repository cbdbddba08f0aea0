"""PartitionedReader: one Reader per partition behind the Reader API.

One feeder task per partition moves what its reader reads into a shared
bounded queue (read_next takes from it). A partition's reader records what
its feeder took, so a reconnect resumes after it and nothing is read twice.
Only earliest / latest are start ids for the whole topic, and a seek takes a
publish time or earliest / latest (a message id names one partition only).
"""

from __future__ import annotations

import asyncio

import structlog

from magnetar.client.aio.errors import (
    AlreadyClosed,
    OperationNotSupported,
    PulsarException,
    Timeout,
)
from magnetar.client.aio.message import Message
from magnetar.client.aio.reader import Reader
from magnetar.proto.ids import MessageId

_log = structlog.get_logger("magnetar.client.partitioned_reader")


class PartitionedReader:
    def __init__(self, topic: str, readers: list[Reader], queue_size: int) -> None:
        self._topic = topic
        self._readers = readers
        self._queue: asyncio.Queue[Message] = asyncio.Queue(max(queue_size, 1))
        self._feeders: list[asyncio.Task[None]] = []
        self._closed = False
        self._closed_event = asyncio.Event()
        self._log = _log.bind(topic=topic)
        self._start_feeders()

    def _start_feeders(self) -> None:
        loop = asyncio.get_running_loop()
        self._feeders = [
            loop.create_task(self._feed(r), name=f"pulsar-reader-feed-{r.topic()}")
            for r in self._readers
        ]

    async def _stop_feeders(self) -> None:
        feeders, self._feeders = self._feeders, []
        for task in feeders:
            task.cancel()
        await asyncio.gather(*feeders, return_exceptions=True)

    async def _feed(self, reader: Reader) -> None:
        while True:
            try:
                msg = await reader.read_next()
            except PulsarException as exc:
                if not self._closed:
                    self._log.warning(
                        "partition reader stopped", partition=reader.topic(), error=str(exc)
                    )
                return
            await self._queue.put(msg)

    def topic(self) -> str:
        return self._topic

    def is_connected(self) -> bool:
        return all(r.is_connected() for r in self._readers)

    async def read_next(self, timeout_millis: int | None = None) -> Message:
        """The next message of any partition; Timeout after `timeout_millis` without one."""
        if self._closed:
            raise AlreadyClosed(f"reader on {self._topic} is closed")
        if not self._queue.empty():
            return self._queue.get_nowait()
        loop = asyncio.get_running_loop()
        get = loop.create_task(self._queue.get())
        closed = loop.create_task(self._closed_event.wait())
        try:
            timeout = None if timeout_millis is None else timeout_millis / 1000
            done, _ = await asyncio.wait(
                {get, closed}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            for task in (get, closed):
                if not task.done():
                    task.cancel()
        if get in done:
            return get.result()
        if closed in done:
            raise AlreadyClosed(f"reader on {self._topic} closed while reading")
        raise Timeout(f"no message within {timeout_millis} ms")

    async def has_message_available(self) -> bool:
        if not self._queue.empty():
            return True
        answers = await asyncio.gather(*(r.has_message_available() for r in self._readers))
        # A feeder may have moved a message here while the brokers answered.
        return any(answers) or not self._queue.empty()

    async def get_last_message_id(self) -> MessageId:
        raise OperationNotSupported(
            f"{self._topic} is partitioned: each partition has its own last message id"
        )

    async def seek(self, target: MessageId | int) -> None:
        """Every partition to a publish time in ms, or to earliest / latest."""
        if isinstance(target, MessageId) and target not in (MessageId.earliest, MessageId.latest):
            raise OperationNotSupported(
                "a partitioned reader seeks by publish time, earliest or latest"
            )
        if self._closed:
            raise AlreadyClosed(f"reader on {self._topic} is closed")
        # Stop the feeders first: nothing from before the seek may reach the queue after it.
        await self._stop_feeders()
        while not self._queue.empty():
            self._queue.get_nowait()
        try:
            await asyncio.gather(*(r.seek(target) for r in self._readers))
        finally:
            if not self._closed:
                self._start_feeders()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._closed_event.set()
        await self._stop_feeders()
        await asyncio.gather(*(r.close() for r in self._readers), return_exceptions=True)
