"""Key_Shared consumer selectors: which consumer owns a key hash (SEM-4.4).

A key hash is the unsigned Murmur3 32-bit hash of the entry's sticky key;
the range selectors look at its slot (`hash % 65536`), the ring at the whole
hash. Three selectors behind one interface, as in Pulsar:

- `AutoSplitSelector` (Pulsar's HashRangeAutoSplitStickyKeyConsumerSelector,
  SEM-4.4.1): one range per consumer; a newcomer halves the largest range and
  takes its lower half; a leaver's range merges into its right neighbour (the
  left one when it was last).
- `ConsistentHashingSelector` (ConsistentHashingStickyKeyConsumerSelector,
  SEM-4.4.2): 100 points per consumer on a 32-bit ring.
- `StickySelector` (HashRangeExclusiveStickyKeyConsumerSelector, SEM-4.4.3):
  the ranges each consumer declared; overlap or no range: refused.

Pure logic, no I/O; a refused consumer leaves the selector unchanged.
"""

from __future__ import annotations

import bisect
import itertools
from abc import ABC, abstractmethod
from collections.abc import Sequence

from magnetar.broker.dispatchers.consumer import Consumer, KeySharedMode
from magnetar.broker.errors import ConsumerAssignError
from magnetar.proto.hashes import KEY_SHARED_SLOTS, murmur3_32

HashRange = tuple[int, int]  # inclusive slot bounds, as KeySharedMeta carries them
_SLOT_MASK = KEY_SHARED_SLOTS - 1
RING_POINTS_PER_CONSUMER = 100


class ConsumerSelector(ABC):
    """Maps a key hash to the consumer that owns it."""

    @abstractmethod
    def add_consumer(self, consumer: Consumer) -> None:
        """Give `consumer` its share; ConsumerAssignError when it cannot have one."""

    @abstractmethod
    def remove_consumer(self, consumer: Consumer) -> None:
        """Take the consumer's share away and hand it to the others."""

    @abstractmethod
    def select(self, key_hash: int) -> Consumer | None:
        """The owner of `key_hash`, or None when nobody owns it."""

    @abstractmethod
    def ranges(self) -> dict[Consumer, list[HashRange]]:
        """Each consumer's slots (ring: none; for stats and tests)."""


def new_selector(mode: int, *, consistent_hashing: bool) -> ConsumerSelector:
    """The selector of a Key_Shared subscription in `mode`, persistent or not:
    STICKY the declared ranges; AUTO_SPLIT split ranges, or the ring with the
    broker option subscription_key_shared_use_consistent_hashing."""
    if mode == KeySharedMode.STICKY:
        return StickySelector()
    if consistent_hashing:
        return ConsistentHashingSelector()
    return AutoSplitSelector()


class _RangeTable(ConsumerSelector, ABC):
    """Disjoint slot ranges, sorted, each with its owner; lookups by bisection."""

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []
        self._owners: list[Consumer] = []

    def select(self, key_hash: int) -> Consumer | None:
        slot = key_hash & _SLOT_MASK
        i = bisect.bisect_left(self._ends, slot)
        if i < len(self._ends) and self._starts[i] <= slot:
            return self._owners[i]
        return None

    def ranges(self) -> dict[Consumer, list[HashRange]]:
        owned: dict[Consumer, list[HashRange]] = {}
        for start, end, owner in zip(self._starts, self._ends, self._owners, strict=True):
            owned.setdefault(owner, []).append((start, end))
        return owned

    def _insert(self, start: int, end: int, owner: Consumer) -> None:
        i = bisect.bisect_left(self._starts, start)
        self._starts.insert(i, start)
        self._ends.insert(i, end)
        self._owners.insert(i, owner)

    def _delete(self, i: int) -> None:
        del self._starts[i], self._ends[i], self._owners[i]


class AutoSplitSelector(_RangeTable):
    """SEM-4.4.1. Worked example: C1..C4 joining in order end with
    C3 [0,16384), C2 [16384,32768), C4 [32768,49152), C1 [49152,65536)."""

    def add_consumer(self, consumer: Consumer) -> None:
        if not self._owners:
            self._insert(0, KEY_SHARED_SLOTS - 1, consumer)
            return
        # The largest range; on a tie the lowest, as Pulsar picks it.
        widest = max(range(len(self._owners)), key=lambda i: (self._ends[i] - self._starts[i], -i))
        start, end = self._starts[widest], self._ends[widest]
        if start == end:
            raise ConsumerAssignError(f"no hash range left to split for consumer {consumer.name!r}")
        middle = start + (end - start) // 2
        self._starts[widest] = middle + 1  # the owner keeps the upper half
        self._insert(start, middle, consumer)

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer not in self._owners:
            return
        i = self._owners.index(consumer)
        start, end = self._starts[i], self._ends[i]
        self._delete(i)
        if not self._owners:
            return
        if i < len(self._owners):
            self._starts[i] = start  # the right neighbour grows down
        else:
            self._ends[i - 1] = end  # it was last: the left neighbour grows up


class StickySelector(_RangeTable):
    """SEM-4.4.3: each consumer's declared ranges, never overlapping."""

    def add_consumer(self, consumer: Consumer) -> None:
        policy = consumer.key_shared
        declared: Sequence[HashRange] = policy.hash_ranges if policy is not None else ()
        if not declared:
            raise ConsumerAssignError(
                f"sticky Key_Shared consumer {consumer.name!r} declared no hash range"
            )
        ordered = sorted(declared)
        for start, end in ordered:
            if not 0 <= start <= end < KEY_SHARED_SLOTS:
                raise ConsumerAssignError(
                    f"consumer {consumer.name!r}: invalid hash range [{start}, {end}]"
                )
        for (_, end), (start, _) in itertools.pairwise(ordered):
            if start <= end:
                raise ConsumerAssignError(f"consumer {consumer.name!r}: its ranges overlap")
        for start, end in ordered:
            conflict = self._overlapping(start, end)
            if conflict is not None:
                raise ConsumerAssignError(
                    f"range [{start}, {end}] of consumer {consumer.name!r} overlaps "
                    f"[{self._starts[conflict]}, {self._ends[conflict]}] of "
                    f"{self._owners[conflict].name!r}"
                )
        for start, end in ordered:
            self._insert(start, end, consumer)

    def _overlapping(self, start: int, end: int) -> int | None:
        # The first range ending at or after `start` is the only candidate.
        i = bisect.bisect_left(self._ends, start)
        if i < len(self._ends) and self._starts[i] <= end:
            return i
        return None

    def remove_consumer(self, consumer: Consumer) -> None:
        for i in reversed(range(len(self._owners))):
            if self._owners[i] is consumer:
                self._delete(i)


def ring_points(consumer_name: str, count: int = RING_POINTS_PER_CONSUMER) -> list[int]:
    """A consumer's ring points: murmur3(name + str(i)) for i in 1..count (SEM-4.4.2)."""
    return [murmur3_32(f"{consumer_name}{i}") for i in range(1, count + 1)]


class ConsistentHashingSelector(ConsumerSelector):
    """SEM-4.4.2: a key maps to the first point clockwise from its hash; a
    point several consumers share resolves by `hash % len(sharers)`."""

    def __init__(self, points_per_consumer: int = RING_POINTS_PER_CONSUMER) -> None:
        self._points_per_consumer = points_per_consumer
        self._points: list[int] = []  # sorted
        self._sharers: dict[int, list[Consumer]] = {}

    def add_consumer(self, consumer: Consumer) -> None:
        for point in ring_points(consumer.name, self._points_per_consumer):
            sharers = self._sharers.get(point)
            if sharers is None:
                self._sharers[point] = [consumer]
                bisect.insort(self._points, point)
            elif consumer not in sharers:
                sharers.append(consumer)

    def remove_consumer(self, consumer: Consumer) -> None:
        for point in ring_points(consumer.name, self._points_per_consumer):
            sharers = self._sharers.get(point)
            if sharers is None or consumer not in sharers:
                continue
            sharers.remove(consumer)
            if not sharers:
                del self._sharers[point]
                del self._points[bisect.bisect_left(self._points, point)]

    def select(self, key_hash: int) -> Consumer | None:
        points = self._points
        if not points:
            return None
        i = bisect.bisect_left(points, key_hash)
        sharers = self._sharers[points[i] if i < len(points) else points[0]]
        return sharers[key_hash % len(sharers)]

    def ranges(self) -> dict[Consumer, list[HashRange]]:
        return {c: [] for sharers in self._sharers.values() for c in sharers}
