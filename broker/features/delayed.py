"""Delayed delivery (SEMANTICS 8.1): positions of entries whose deliver_at_time
lies ahead, by due time.

Holds positions, never payloads, packed: each bucket (a span of due times)
keeps two int64 arrays, due time and ledger_id << 32 | entry_id, so a tracked
message costs 16 bytes plus its bucket's share (`memory_bytes`). Buckets sit
in a sorted map so the earliest due time is found without a scan of all.
The clock is wall time in ms (deliver_at_time is epoch ms) and injected.
"""

from __future__ import annotations

import sys
import time
from array import array
from collections.abc import Callable

from sortedcontainers import SortedDict

from magnetar.broker.storage.api import Position

_ENTRY_BITS = 32
_ENTRY_MASK = (1 << _ENTRY_BITS) - 1


def _pack(position: Position) -> int:
    return (position.ledger_id << _ENTRY_BITS) | position.entry_id


def _unpack(value: int) -> Position:
    return Position(value >> _ENTRY_BITS, value & _ENTRY_MASK)


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class DelayedDeliveryTracker:
    def __init__(self, *, bucket_ms: int = 1000, clock: Callable[[], int] = wall_clock_ms) -> None:
        self.bucket_ms = bucket_ms
        self.clock = clock
        # bucket index -> (due times, packed positions), in insertion order.
        self._buckets: SortedDict = SortedDict()
        self._size = 0
        # Entries ever held (a counter for metrics; never decreases).
        self.held_total = 0

    def __len__(self) -> int:
        return self._size

    def add(self, position: Position, deliver_at_ms: int) -> bool:
        """Hold `position` until `deliver_at_ms`; False when it is due already."""
        if deliver_at_ms <= self.clock():
            return False
        if not 0 <= position.entry_id <= _ENTRY_MASK or not 0 <= position.ledger_id < 1 << 31:
            raise ValueError(f"position {position} does not pack into 64 bits")
        key = deliver_at_ms // self.bucket_ms
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = (array("q"), array("q"))
            self._buckets[key] = bucket
        bucket[0].append(deliver_at_ms)
        bucket[1].append(_pack(position))
        self._size += 1
        self.held_total += 1
        return True

    def next_due_ms(self) -> int | None:
        """The earliest due time held, or None when empty."""
        if not self._buckets:
            return None
        times, _ = self._buckets.peekitem(0)[1]
        return int(min(times))

    def pop_due(self, limit: int) -> list[Position]:
        """Up to `limit` positions whose time has come, earliest first (then
        returned in position order)."""
        now = self.clock()
        due: list[int] = []
        while self._buckets and len(due) < limit:
            key, (times, packed) = self._buckets.peekitem(0)
            if key * self.bucket_ms > now:
                break
            ready = sorted(
                (at, value) for at, value in zip(times, packed, strict=True) if at <= now
            )[: limit - len(due)]
            taken = {value for _, value in ready}
            due.extend(taken)
            if len(taken) == len(times):
                del self._buckets[key]
                continue
            keep = [(at, v) for at, v in zip(times, packed, strict=True) if v not in taken]
            self._buckets[key] = (
                array("q", (a for a, _ in keep)),
                array("q", (v for _, v in keep)),
            )
            break  # the rest of this bucket is not due yet, or the limit is reached
        self._size -= len(due)
        return [_unpack(value) for value in sorted(due)]

    def pop_all(self) -> list[Position]:
        """Every position held, due or not, in position order."""
        held = sorted(v for _, (_, packed) in self._buckets.items() for v in packed)
        self.clear()
        return [_unpack(value) for value in held]

    def clear(self) -> None:
        self._buckets.clear()
        self._size = 0

    def memory_bytes(self) -> int:
        """What the held positions occupy (arrays, their tuples and the map)."""
        total = sys.getsizeof(self._buckets)
        for pair in self._buckets.values():
            total += sys.getsizeof(pair) + sum(sys.getsizeof(a) for a in pair) + 64
        return total
