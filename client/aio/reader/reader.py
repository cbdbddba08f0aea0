"""Reader: a non-durable, Exclusive subscription that starts at a message id
(SEMANTICS 5: readers; WIRE 11).

The broker starts delivery at the start entry itself; the reader drops what
comes before the start (and the start itself unless inclusive), and
everything up to the last message it handed out, so a resubscription after
a reconnect (which asks again from the last message read) repeats nothing.

A seek to a publish time makes the broker close the reader, which
resubscribes from the earliest message (a non-durable subscription keeps no
position across it); the reader then drops what was published before that
time, as the broker's own seek would have.
"""

from __future__ import annotations

import time

from magnetar.client.aio.consumer.consumer import Consumer
from magnetar.client.aio.errors import Timeout
from magnetar.client.aio.message import Message
from magnetar.proto.ids import MessageId, read_after

EARLIEST, LATEST = MessageId.earliest, MessageId.latest


class Reader:
    def __init__(self, consumer: Consumer, start: MessageId, inclusive: bool) -> None:
        self.consumer = consumer
        self._start = start
        self._inclusive = inclusive
        self._last_read: MessageId | None = None
        # A reader at latest: the topic's last message when it started (what
        # has_message_available compares with until one is read).
        self._latest_at_start: MessageId | None = None
        # After seek(time): messages published before it are dropped until
        # the first one at or after it; the last dropped one marks progress.
        self._seek_time_ms: int | None = None
        self._dropped: MessageId | None = None
        # A message has_message_available had to read to answer.
        self._stash: Message | None = None

    async def start(self) -> None:
        if self._start == LATEST:
            await self._at_latest()

    async def _at_latest(self) -> None:
        """At latest: remember the topic's last message (has_message_available
        compares with it); inclusive, move to it so that it is read, as the
        official client does."""
        last = await self.consumer.get_last_message_id()
        if not self._inclusive:
            self._latest_at_start = last
        elif last.entry_id >= 0:
            await self.consumer.seek(last)
            self._start = self.consumer.start_message_id = last

    def topic(self) -> str:
        return self.consumer.topic()

    def is_connected(self) -> bool:
        return self.consumer.is_connected()

    def _wanted_message(self, msg: Message) -> bool:
        msg_id = msg.proto_message_id()
        if self._seek_time_ms is not None:
            if msg.publish_timestamp() < self._seek_time_ms:
                self._dropped = msg_id
                return False
            self._seek_time_ms = None
        return self._wanted(msg_id)

    def _wanted(self, msg_id: MessageId) -> bool:
        if self._last_read is not None:
            return msg_id.position() > self._last_read.position()
        if self._start in (EARLIEST, LATEST):
            return True
        return read_after(msg_id, self._start, self._inclusive)

    async def read_next(self, timeout_millis: int | None = None) -> Message:
        """The next message; Timeout after `timeout_millis` without one."""
        deadline = None if timeout_millis is None else time.monotonic() + timeout_millis / 1000
        stashed, self._stash = self._stash, None
        if stashed is not None:
            return self._accept(stashed)
        while True:
            remaining = None
            if deadline is not None:
                remaining = max(0, int((deadline - time.monotonic()) * 1000))
            msg = await self.consumer.receive(remaining)
            if self._wanted_message(msg):
                return self._accept(msg)
            # else: before the start (or seek time), or read before a reconnect

    async def read_many(
        self, max_messages: int, max_bytes: int, timeout_millis: int | None = None
    ) -> list[Message]:
        """read_next's message and those already queued behind it, up to
        `max_messages` and about `max_bytes` of values: one wait for many
        messages (how the Spark connector's tasks read their ranges)."""
        taken = [await self.read_next(timeout_millis)]
        size = len(taken[0].data())
        if max_messages <= 1 or size >= max_bytes:
            return taken
        queued = self.consumer.queue.take_queued(max_messages - 1, max_bytes - size)
        if queued:
            self.consumer.messages_delivered(queued)
            # read_next has passed the start (and a seek time): what is queued
            # behind it is wanted if after the last message read, which is
            # _wanted's test, here without a call per message. The queue was
            # emptied at the last (re)subscription, so it only grows, and a
            # repeat could only be of what is behind it.
            last = taken[0].proto_message_id().position()
            for msg in queued:
                position = msg.proto_message_id().position()
                if position > last:
                    taken.append(msg)
                    last = position
            self._accept(taken[-1])
        return taken

    def _accept(self, msg: Message) -> Message:
        msg_id = msg.proto_message_id()
        self._last_read = msg_id
        # A resubscription (reconnect) starts here; the repeat is dropped.
        self.consumer.start_message_id = msg_id
        return msg

    async def has_message_available(self) -> bool:
        """Whether read_next would return a message now or soon: compares the
        topic's last message with the last one read (or the start)."""
        if self._stash is not None:
            return True
        if self._seek_time_ms is not None:
            return await self._any_after_seek_time()
        # Queued messages answer only if one is to be read: the start entry
        # itself, or what a resubscription repeats, waits there to be dropped.
        if any(self._wanted(m.proto_message_id()) for m in self.consumer.queue):
            return True
        last = await self.consumer.get_last_message_id()
        if last.entry_id < 0:
            return False  # nothing stored
        if self._last_read is not None:
            return last.position() > self._last_read.position()
        if self._start == EARLIEST:
            return True
        if self._start == LATEST:
            if self._latest_at_start is None:
                return True  # inclusive: the last message itself is to be read
            return last.position() > self._latest_at_start.position()
        return read_after(last, self._start, self._inclusive)

    async def get_last_message_id(self) -> MessageId:
        """The topic's last message id (beyond the official Reader; entry id
        -1 when the topic is empty)."""
        return await self.consumer.get_last_message_id()

    async def _any_after_seek_time(self) -> bool:
        """After a time seek: read (dropping what is older) until a message at
        or after the time turns up (kept for read_next) or the last one is
        passed."""
        last = await self.consumer.get_last_message_id()
        while True:
            if last.entry_id < 0:
                return False
            if self._dropped is not None and self._dropped.entry_key() >= last.entry_key():
                return False
            try:
                msg = await self.consumer.receive(
                    int(self.consumer.context.operation_timeout * 1000)
                )
            except Timeout:
                return False
            if self._wanted_message(msg):
                self._stash = msg
                return True

    async def seek(self, target: MessageId | int) -> None:
        """To a message id (the reader's inclusiveness applies, as in the
        official client) or to a publish time in ms."""
        await self.consumer.seek(target)
        self._last_read = self._latest_at_start = self._dropped = self._stash = None
        if isinstance(target, MessageId):
            self._start, self._seek_time_ms = target, None
        else:
            self._start, self._seek_time_ms = EARLIEST, int(target)
        self.consumer.start_message_id = self._start
        if self._start == LATEST:
            await self._at_latest()

    async def close(self) -> None:
        await self.consumer.close()
