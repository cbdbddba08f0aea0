"""Redelivery bookkeeping of one subscription (SEM-3.7, SEM-3.8).

`RedeliveryTracker` counts how often each entry was handed out again; the
count travels in MESSAGE.redelivery_count and is dropped when the entry is
acked. `ReplayQueue` holds positions waiting to be dispatched again (Shared:
a consumer left or asked for them), oldest first.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from sortedcontainers import SortedSet

from magnetar.broker.storage.api import Position


class RedeliveryTracker:
    __slots__ = ("_counts",)

    def __init__(self) -> None:
        self._counts: dict[Position, int] = {}

    def __len__(self) -> int:
        return len(self._counts)

    def get(self, position: Position) -> int:
        return self._counts.get(position, 0) if self._counts else 0

    def increment(self, position: Position) -> int:
        count = self._counts.get(position, 0) + 1
        self._counts[position] = count
        return count

    def remove(self, position: Position) -> None:
        if self._counts:
            self._counts.pop(position, None)

    def remove_up_to(self, position: Position) -> None:
        """Forget every count at or before `position` (a cumulative ack)."""
        if self._counts:
            for pos in [p for p in self._counts if p <= position]:
                del self._counts[pos]

    def clear(self) -> None:
        self._counts.clear()


class ReplayQueue:
    """Positions to dispatch again, in position order, without duplicates."""

    __slots__ = ("_positions",)

    def __init__(self) -> None:
        self._positions: SortedSet = SortedSet()

    def __len__(self) -> int:
        return len(self._positions)

    def __bool__(self) -> bool:
        return bool(self._positions)

    def __contains__(self, position: Position) -> bool:
        return position in self._positions

    def __iter__(self) -> Iterator[Position]:
        return iter(self._positions)

    def first(self) -> Position | None:
        return self._positions[0] if self._positions else None

    def add_all(self, positions: Iterable[Position]) -> None:
        self._positions.update(positions)

    def discard(self, position: Position) -> None:
        self._positions.discard(position)

    def discard_up_to(self, position: Position) -> None:
        while self._positions and self._positions[0] <= position:
            self._positions.pop(0)

    def take(self, limit: int) -> list[Position]:
        """Remove and return up to `limit` of the oldest positions."""
        taken = list(self._positions.islice(0, limit))
        del self._positions[: len(taken)]
        return taken

    def clear(self) -> None:
        self._positions.clear()
