"""Reassembly of chunked messages on the consumer side (SEM-8.2).

Chunks of one message share a uuid and arrive in chunk_id order 0..n-1. At
most `max_pending` messages are reassembled at once; starting one more drops
the oldest incomplete one. Incomplete messages older than `expire_after`
seconds are dropped too. Dropped chunks are reported so the consumer can ack
them (or leave them to redelivery).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.ids import MessageId


@dataclass
class _Pending:
    num_chunks: int
    total_size: int
    started: float
    parts: list[bytes] = field(default_factory=list)
    ids: list[MessageId] = field(default_factory=list)


@dataclass(frozen=True)
class Assembled:
    payload: bytes
    chunk_ids: tuple[MessageId, ...]


class ChunkAssembler:
    def __init__(
        self,
        max_pending: int = 10,
        expire_after: float = 60.0,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_pending = max(max_pending, 1)
        self.expire_after = expire_after
        self._clock = clock
        self._pending: OrderedDict[str, _Pending] = OrderedDict()
        # Chunks dropped since last asked: (reason, ids).
        self.dropped: list[tuple[str, tuple[MessageId, ...]]] = []

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    def add(self, meta: pb.MessageMetadata, payload: bytes, msg_id: MessageId) -> Assembled | None:
        """Take one chunk; the whole message once its last chunk is in, else None."""
        self._expire()
        uuid = meta.uuid
        chunk_id = meta.chunk_id
        pending = self._pending.get(uuid)
        if chunk_id == 0:
            if pending is not None:
                # A resent message starts over.
                del self._pending[uuid]
            while len(self._pending) >= self.max_pending:
                old_uuid, old = self._pending.popitem(last=False)
                self.dropped.append(
                    (f"too many chunked messages; dropped {old_uuid}", tuple(old.ids))
                )
            pending = _Pending(meta.num_chunks_from_msg, meta.total_chunk_msg_size, self._clock())
            self._pending[uuid] = pending
        elif pending is None or chunk_id != len(pending.parts):
            # A chunk without its predecessors (e.g. after a drop): unusable.
            self.dropped.append((f"chunk {chunk_id} of {uuid} out of order", (msg_id,)))
            return None
        pending.parts.append(payload)
        pending.ids.append(msg_id)
        if len(pending.parts) < pending.num_chunks:
            return None
        del self._pending[uuid]
        data = b"".join(pending.parts)
        if len(data) != pending.total_size:
            self.dropped.append(
                (f"{uuid}: {len(data)} bytes, expected {pending.total_size}", tuple(pending.ids))
            )
            return None
        return Assembled(data, tuple(pending.ids))

    def _expire(self) -> None:
        if self.expire_after <= 0 or not self._pending:
            return
        now = self._clock()
        for uuid in list(self._pending):
            pending = self._pending[uuid]
            if now - pending.started < self.expire_after:
                break
            del self._pending[uuid]
            self.dropped.append((f"{uuid} expired incomplete", tuple(pending.ids)))

    def take_dropped(self) -> list[tuple[str, tuple[MessageId, ...]]]:
        dropped, self.dropped = self.dropped, []
        return dropped

    def clear(self) -> None:
        self._pending.clear()
