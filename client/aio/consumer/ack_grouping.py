"""AcknowledgmentsGroupingTracker: acks collected and sent in groups (SEM-3.4).

Individual acks collect in a set of entries, batch-index acks in one bitset
per entry (bits set = indexes still unacked, as ack_set means on the wire),
and cumulative acks keep only the newest position. The owner flushes when
`flush_due(now)` says so (every `group_time` seconds), at once when `add_*`
returns True (`max_pending` reached, or `group_time` 0), and on close.

The tracker does no I/O and keeps no task: `take()` hands back the CommandAck
bodies with the futures of the acks they carry, and the consumer sends them
(as requests when ack receipts are on, SEM-1 ack_receipt_enabled).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from magnetar.client.aio.net import commands
from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.ids import MessageId

DEFAULT_GROUP_TIME = 0.1
DEFAULT_MAX_PENDING = 1000

AckWaiter = asyncio.Future[None]


@dataclass
class PendingAcks:
    """One CommandAck to send and the acks waiting for its answer."""

    command: pb.CommandAck
    waiters: list[AckWaiter] = field(default_factory=list)


def _bitset_words(bits: int, size: int) -> list[int]:
    """`bits` (bit i = index i) as the signed 64-bit words of a wire ack_set."""
    words = []
    for start in range(0, max(size, 1), 64):
        word = (bits >> start) & 0xFFFF_FFFF_FFFF_FFFF
        words.append(word - (1 << 64) if word >= 1 << 63 else word)
    return words


class AckGroupingTracker:
    def __init__(
        self,
        consumer_id: int,
        *,
        group_time: float = DEFAULT_GROUP_TIME,
        max_pending: int = DEFAULT_MAX_PENDING,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.consumer_id = consumer_id
        self.group_time = group_time
        self.max_pending = max(max_pending, 1)
        self._clock = clock
        self._entries: set[tuple[int, int]] = set()
        # (ledger, entry) -> (batch size, bits of the indexes still unacked)
        self._batch_bits: dict[tuple[int, int], tuple[int, int]] = {}
        self._cumulative: MessageId | None = None
        self._waiters: list[AckWaiter] = []
        self._last_flush = clock()

    @property
    def pending_count(self) -> int:
        return len(self._entries) + len(self._batch_bits) + (self._cumulative is not None)

    @property
    def immediate(self) -> bool:
        return self.group_time <= 0

    def _added(self, waiter: AckWaiter | None) -> bool:
        if waiter is not None:
            self._waiters.append(waiter)
        return self.immediate or self.pending_count >= self.max_pending

    def add_individual(self, entry: tuple[int, int], waiter: AckWaiter | None = None) -> bool:
        """Ack a whole entry; True when the owner must flush now."""
        self._entries.add(entry)
        self._batch_bits.pop(entry, None)
        return self._added(waiter)

    def add_batch_index(self, msg_id: MessageId, waiter: AckWaiter | None = None) -> bool:
        """Ack one index of a batch entry (batch-index ack, SEM-3.3)."""
        key = msg_id.entry_key()
        if key in self._entries:
            return self._added(waiter)
        size = max(msg_id.batch_size, msg_id.batch_index + 1)
        old_size, bits = self._batch_bits.get(key, (size, (1 << size) - 1))
        bits &= ~(1 << msg_id.batch_index)
        if bits == 0:
            del self._batch_bits[key]
            self._entries.add(key)
        else:
            self._batch_bits[key] = (max(old_size, size), bits)
        return self._added(waiter)

    def add_cumulative(self, msg_id: MessageId, waiter: AckWaiter | None = None) -> bool:
        """Ack everything up to `msg_id`; only the newest cumulative position is kept."""
        if self._cumulative is None or msg_id > self._cumulative:
            self._cumulative = msg_id
        return self._added(waiter)

    def is_pending(self, msg_id: MessageId) -> bool:
        """Acked but not yet sent (a redelivered copy of it can be dropped)."""
        return self.is_entry_pending(msg_id.entry_key())

    def is_entry_pending(self, key: tuple[int, int]) -> bool:
        """The whole entry is acked but the ack not yet sent."""
        if not self._entries and self._cumulative is None:
            return False
        if key in self._entries:
            return True
        cumulative = self._cumulative
        return cumulative is not None and key <= cumulative.entry_key() and not cumulative.is_batch

    def wait(self, waiter: AckWaiter) -> None:
        """`waiter` is answered with the next flush (ack receipts)."""
        self._waiters.append(waiter)

    def flush_due(self, now: float | None = None) -> bool:
        if not self.pending_count and not self._waiters:
            return False
        now = self._clock() if now is None else now
        return now - self._last_flush >= self.group_time

    def take(self) -> list[PendingAcks]:
        """The acks to send, grouped in at most two commands; the tracker is emptied."""
        self._last_flush = self._clock()
        out: list[PendingAcks] = []
        waiters, self._waiters = self._waiters, []
        if self._entries or self._batch_bits:
            command = commands.individual_ack(
                self.consumer_id,
                sorted(self._entries),
                [
                    (ledger, entry, size, _bitset_words(bits, size))
                    for (ledger, entry), (size, bits) in sorted(self._batch_bits.items())
                ],
            )
            self._entries.clear()
            self._batch_bits.clear()
            out.append(PendingAcks(command))
        cumulative, self._cumulative = self._cumulative, None
        if cumulative is not None:
            size, ack_set = 0, None
            if cumulative.is_batch and cumulative.batch_size > 0:
                # The indexes after the acked one stay unacked.
                size = cumulative.batch_size
                bits = ((1 << size) - 1) & ~((1 << (cumulative.batch_index + 1)) - 1)
                if bits:
                    ack_set = _bitset_words(bits, size)
            command = commands.cumulative_ack(
                self.consumer_id, cumulative.ledger_id, cumulative.entry_id, size, ack_set
            )
            out.append(PendingAcks(command))
        if out:
            out[-1].waiters = waiters
        else:
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)
        return out

    def clear(self) -> list[AckWaiter]:
        """Forget everything (the acks were lost with the connection); the waiters left."""
        self._entries.clear()
        self._batch_bits.clear()
        self._cumulative = None
        waiters, self._waiters = self._waiters, []
        return waiters
