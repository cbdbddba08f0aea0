"""PartitionedReader: one Reader per partition behind the Reader API.

One feeder task per partition moves what its reader reads into a shared
bounded queue (read_next takes from it). A partition's reader records what
its feeder took, so a reconnect resumes after it and nothing is read twice.

Start ids and seeks follow Pulsar's multi-topic reader (the official
client does the same against our broker):
- earliest / latest, or a publish time for seek, apply to every partition;
- create_reader at a message id starts every partition at that position
  (ledger, entry, batch index; its partition field is not consulted),
  exclusive or inclusive: the id's own partition starts just after it (or
  at it); the others skip their entries at or before that position, so with
  ledger ids allocated broker-wide in increasing order they read what their
  ledgers opened after the id's ledger hold;
- seek(message id) moves only the partition the id names; the others keep
  their place and what they have read ahead (the official client's C++ core
  drops the other partitions' prefetched messages here; we do not). An id
  that names no partition of the topic is refused, as the official client
  refuses an id that names no subscribed topic.
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
from magnetar.client.aio.reader.reader import Reader
from magnetar.proto.ids import MessageId

_log = structlog.get_logger("magnetar.client.partitioned_reader")


class PartitionedReader:
    def __init__(self, topic: str, readers: list[Reader], queue_size: int) -> None:
        self._topic = topic
        self._readers = readers  # index i reads partition i
        # Each message with the index of its partition, for a one-partition seek.
        self._queue: asyncio.Queue[tuple[int, Message]] = asyncio.Queue(max(queue_size, 1))
        self._feeders: dict[int, asyncio.Task[None]] = {}
        self._closed = False
        self._closed_event = asyncio.Event()
        self._log = _log.bind(topic=topic)
        for index in range(len(readers)):
            self._start_feeder(index)

    def _start_feeder(self, index: int) -> None:
        reader = self._readers[index]
        self._feeders[index] = asyncio.get_running_loop().create_task(
            self._feed(index, reader), name=f"pulsar-reader-feed-{reader.topic()}"
        )

    async def _stop_feeders(self, indexes: list[int]) -> None:
        feeders = [self._feeders.pop(i) for i in indexes if i in self._feeders]
        for task in feeders:
            task.cancel()
        await asyncio.gather(*feeders, return_exceptions=True)

    async def _feed(self, index: int, reader: Reader) -> None:
        while True:
            try:
                msg = await reader.read_next()
            except PulsarException as exc:
                if not self._closed:
                    self._log.warning(
                        "partition reader stopped", partition=reader.topic(), error=str(exc)
                    )
                return
            await self._queue.put((index, msg))

    def _drop_queued(self, indexes: set[int]) -> None:
        """Forget what the partitions in `indexes` read ahead; the others' stays, in order."""
        kept = []
        while not self._queue.empty():
            item = self._queue.get_nowait()
            if item[0] not in indexes:
                kept.append(item)
        for item in kept:
            self._queue.put_nowait(item)  # fewer than were there: never full

    def topic(self) -> str:
        return self._topic

    def is_connected(self) -> bool:
        return all(r.is_connected() for r in self._readers)

    async def read_next(self, timeout_millis: int | None = None) -> Message:
        """The next message of any partition; Timeout after `timeout_millis` without one."""
        if self._closed:
            raise AlreadyClosed(f"reader on {self._topic} is closed")
        if not self._queue.empty():
            return self._queue.get_nowait()[1]
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
            return get.result()[1]
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

    def _seek_scope(self, target: MessageId | int) -> list[int]:
        """The partitions a seek to `target` moves (see the module docstring)."""
        everywhere = list(range(len(self._readers)))
        if not isinstance(target, MessageId) or target in (MessageId.earliest, MessageId.latest):
            return everywhere
        if 0 <= target.partition < len(self._readers):
            return [target.partition]
        raise OperationNotSupported(
            f"{target} names no partition of {self._topic}: seek a message id of one of its "
            "partitions, a publish time, earliest or latest"
        )

    async def seek(self, target: MessageId | int) -> None:
        """Every partition to a publish time in ms or to earliest / latest; the
        partition a message id names to that id (the reader's inclusiveness applies)."""
        if self._closed:
            raise AlreadyClosed(f"reader on {self._topic} is closed")
        scope = self._seek_scope(target)
        # Stop those feeders first: nothing they read before the seek may reach
        # the queue after it.
        await self._stop_feeders(scope)
        self._drop_queued(set(scope))
        try:
            await asyncio.gather(*(self._readers[i].seek(target) for i in scope))
        finally:
            if not self._closed:
                for index in scope:
                    self._start_feeder(index)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._closed_event.set()
        await self._stop_feeders(list(self._feeders))
        await asyncio.gather(*(r.close() for r in self._readers), return_exceptions=True)
