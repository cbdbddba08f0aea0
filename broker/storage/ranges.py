"""A cursor's individually deleted positions: merged closed ranges, with counts.

Positions are not dense integers: a ledger ends and the next one starts at entry
0, so "adjacent" is asked of the ledger (:class:`PositionSpace`). Each range
keeps how many entries and messages it covers so backlog counts are O(1).
Also: Pulsar ack-set (BitSet as int64 words) conversions.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

from sortedcontainers import SortedDict

from magnetar.broker.storage.api import Position

_MASK64 = (1 << 64) - 1


class PositionSpace(Protocol):
    def next_position(self, position: Position) -> Position: ...

    def count_entries(self, first: Position, last: Position) -> int:
        """Existing entries in ``[first, last]``."""
        ...

    def count_messages(self, first: Position, last: Position) -> int:
        """Messages of the existing entries in ``[first, last]``."""
        ...


class DeletedRanges:
    """Disjoint, non-adjacent closed ranges ``[start, end]`` of deleted positions."""

    __slots__ = ("_ranges", "_space", "entries", "messages")

    def __init__(self, space: PositionSpace) -> None:
        self._space = space
        # start -> [end, entries, messages]
        self._ranges: SortedDict = SortedDict()
        self.entries = 0
        self.messages = 0

    def __len__(self) -> int:
        return len(self._ranges)

    def __iter__(self) -> Iterator[tuple[Position, Position]]:
        for start, value in self._ranges.items():
            yield start, value[0]

    def clear(self) -> None:
        self._ranges.clear()
        self.entries = 0
        self.messages = 0

    def contains(self, position: Position) -> bool:
        ranges = self._ranges
        i = ranges.bisect_right(position) - 1
        if i < 0:
            return False
        end: Position = ranges.peekitem(i)[1][0]
        return position <= end

    def range_at_or_after(self, position: Position) -> tuple[Position, Position] | None:
        """The range containing ``position``, else the first one after it."""
        ranges = self._ranges
        i = ranges.bisect_right(position) - 1
        if i >= 0:
            start, value = ranges.peekitem(i)
            if position <= value[0]:
                return start, value[0]
        i += 1
        if i < len(ranges):
            start, value = ranges.peekitem(i)
            return start, value[0]
        return None

    def first(self) -> tuple[Position, Position] | None:
        if not self._ranges:
            return None
        start, value = self._ranges.peekitem(0)
        return start, value[0]

    def add(self, position: Position) -> bool:
        """Add one position; False if it was already there."""
        ranges = self._ranges
        space = self._space
        i = ranges.bisect_right(position) - 1
        left_start: Position | None = None
        if i >= 0:
            left_start, left = ranges.peekitem(i)
            if position <= left[0]:
                return False
            if space.next_position(left[0]) != position:
                left_start = None
        msgs = space.count_messages(position, position)
        self.entries += 1
        self.messages += msgs
        start, end, n, m = position, position, 1, msgs
        if left_start is not None:
            left = ranges.pop(left_start)
            start, n, m = left_start, n + left[1], m + left[2]
        nxt = space.next_position(position)
        right = ranges.pop(nxt, None)
        if right is not None:
            end, n, m = right[0], n + right[1], m + right[2]
        ranges[start] = [end, n, m]
        return True

    def add_range(self, start: Position, end: Position) -> None:
        """Add ``[start, end]`` that overlaps nothing stored (loading state)."""
        n = self._space.count_entries(start, end)
        m = self._space.count_messages(start, end)
        self._ranges[start] = [end, n, m]
        self.entries += n
        self.messages += m

    def merge_adjacent(self) -> None:
        """Merge ranges that became adjacent (ledger layout changed on reopen)."""
        merged: list[tuple[Position, list[Position | int]]] = []
        space = self._space
        for start, value in self._ranges.items():
            if merged:
                prev = merged[-1][1]
                prev_end = prev[0]
                assert isinstance(prev_end, tuple)
                if space.next_position(prev_end) == start:
                    merged[-1] = (merged[-1][0], [value[0], prev[1] + value[1], prev[2] + value[2]])
                    continue
            merged.append((start, list(value)))
        if len(merged) != len(self._ranges):
            self._ranges = SortedDict(merged)

    def pop_first(self) -> tuple[Position, Position]:
        start, value = self._ranges.popitem(0)
        self.entries -= value[1]
        self.messages -= value[2]
        return start, value[0]

    def remove_up_to(self, position: Position) -> None:
        """Forget every deleted position at or before ``position``."""
        ranges = self._ranges
        while ranges:
            start = ranges.peekitem(0)[0]
            if start > position:
                return
            end, n, m = ranges.popitem(0)[1]
            self.entries -= n
            self.messages -= m
            if end > position:
                rest = self._space.next_position(position)
                self.add_range(rest, end)
                return

    def ranges_list(self, limit: int) -> list[tuple[Position, Position]]:
        """The first ``limit`` ranges (closest to mark-delete)."""
        out: list[tuple[Position, Position]] = []
        for start, value in self._ranges.items():
            if len(out) >= limit:
                break
            out.append((start, value[0]))
        return out


def ack_set_to_int(words: Sequence[int]) -> int:
    """Pulsar's BitSet words (int64, signed or not) -> one non-negative int."""
    value = 0
    for i, word in enumerate(words):
        value |= (word & _MASK64) << (64 * i)
    return value


def int_to_ack_set(value: int) -> list[int]:
    """A non-negative int -> BitSet words as signed int64 (trailing zeros trimmed)."""
    words: list[int] = []
    while value:
        word = value & _MASK64
        words.append(word - (1 << 64) if word >= 1 << 63 else word)
        value >>= 64
    return words
