"""Batch containers: the default batcher and the key-based batcher (SEM-8.3).

A container collects messages until the count, byte or delay limit, then
turns them into `BatchPayload`s: the uncompressed batch bytes
([u32 size][SingleMessageMetadata][payload] per message), the sequence id
range, and one callback per message (its batch index is its position).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from magnetar.client.aio.message import OutgoingMessage, SendCallback

_U32 = struct.Struct(">I")


@dataclass(slots=True)
class BatchPayload:
    data: bytes
    first: OutgoingMessage
    sequence_id: int
    highest_sequence_id: int
    callbacks: list[SendCallback | None]

    @property
    def num_messages(self) -> int:
        return len(self.callbacks)


class _Batch:
    """The messages of one batch being filled."""

    __slots__ = ("callbacks", "first", "first_seq", "last_seq", "parts", "size")

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.callbacks: list[SendCallback | None] = []
        self.size = 0
        self.first: OutgoingMessage | None = None
        self.first_seq = -1
        self.last_seq = -1

    def add(self, msg: OutgoingMessage, sequence_id: int, callback: SendCallback | None) -> None:
        meta = msg.single_metadata(sequence_id)
        payload = msg.payload
        self.parts.append(_U32.pack(len(meta)) + meta)
        self.parts.append(payload)
        self.size += 4 + len(meta) + len(payload)
        self.callbacks.append(callback)
        if self.first is None:
            self.first = msg
            self.first_seq = sequence_id
        self.last_seq = sequence_id

    def build(self) -> BatchPayload:
        assert self.first is not None
        return BatchPayload(
            b"".join(self.parts), self.first, self.first_seq, self.last_seq, self.callbacks
        )


class BatchContainer:
    """The default batcher: every message in one batch, in send order."""

    def __init__(self, max_messages: int, max_bytes: int) -> None:
        self.max_messages = max_messages if max_messages > 0 else 1 << 31
        self.max_bytes = max_bytes if max_bytes > 0 else 1 << 62
        self.num_messages = 0
        self.size = 0
        self._batch = _Batch()

    @property
    def is_empty(self) -> bool:
        return self.num_messages == 0

    def has_room_for(self, msg: OutgoingMessage) -> bool:
        """Whether `msg` fits without going over a limit (an empty batch takes anything)."""
        if self.num_messages == 0:
            return True
        return (
            self.num_messages < self.max_messages and self.size + len(msg.payload) <= self.max_bytes
        )

    def is_full(self) -> bool:
        return self.num_messages >= self.max_messages or self.size >= self.max_bytes

    def add(self, msg: OutgoingMessage, sequence_id: int, callback: SendCallback | None) -> None:
        self._batch.add(msg, sequence_id, callback)
        self.num_messages += 1
        self.size += len(msg.payload)

    def drain(self) -> list[BatchPayload]:
        """The batches collected so far (emptying the container)."""
        if self.num_messages == 0:
            return []
        batch, self._batch = self._batch, _Batch()
        self.num_messages = 0
        self.size = 0
        return [batch.build()]

    def fail_all(self) -> list[SendCallback | None]:
        """Drop everything collected; the callbacks to fail."""
        callbacks = self._batch.callbacks
        self._batch = _Batch()
        self.num_messages = 0
        self.size = 0
        return callbacks


class KeyBasedBatchContainer(BatchContainer):
    """One batch per key (ordering key, else partition key), for Key_Shared consumers.

    Limits apply to the container as a whole, as in the official client;
    draining emits the batches in the order of their first message.
    """

    def __init__(self, max_messages: int, max_bytes: int) -> None:
        super().__init__(max_messages, max_bytes)
        self._batches: dict[bytes, _Batch] = {}

    def add(self, msg: OutgoingMessage, sequence_id: int, callback: SendCallback | None) -> None:
        key = msg.batch_key()
        batch = self._batches.get(key)
        if batch is None:
            batch = self._batches[key] = _Batch()
        batch.add(msg, sequence_id, callback)
        self.num_messages += 1
        self.size += len(msg.payload)

    def drain(self) -> list[BatchPayload]:
        batches = sorted(self._batches.values(), key=lambda b: b.first_seq)
        self._batches = {}
        self.num_messages = 0
        self.size = 0
        return [batch.build() for batch in batches]

    def fail_all(self) -> list[SendCallback | None]:
        callbacks = [cb for batch in self._batches.values() for cb in batch.callbacks]
        self._batches = {}
        self.num_messages = 0
        self.size = 0
        return callbacks
