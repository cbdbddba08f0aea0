"""Entry cache: recently written entries, per ledger, under one shared budget.

Each ledger's cache is a contiguous window of entry ids (a list plus a head
index), so a read of n cached entries is one list slice. Entries are added a
written group (a chunk) at a time and leave a chunk at a time, as Pulsar's
entry cache evicts them:

* once every active cursor of the ledger has read past the chunk (its
  readers will not ask for it again; a redelivery reads it from disk);
* once older than the time threshold (Pulsar's
  managedLedgerCacheEvictionTimeThresholdMillis, 1 s);
* oldest first across every ledger of a factory while over the budget.

The budget counts what a cached entry costs in memory, not only its bytes:
the Entry and Position tuples, the entry id, the bytes object's header and the
list slot (ENTRY_OVERHEAD) come on top of the data, several times the data for
small messages.
"""

from __future__ import annotations

import sys
import time
from collections import deque
from collections.abc import Callable

from magnetar.broker.storage.api import Entry, Position

_SAMPLE_ID = 1 << 40
# Bytes a cached entry costs besides its data: the Entry and Position tuples,
# an entry id and a message count that are not small-int singletons, the
# bytes object's header, the list slot, and the allocator rounding the data up.
ENTRY_OVERHEAD = (
    sys.getsizeof(Entry(Position(_SAMPLE_ID, _SAMPLE_ID), b"", _SAMPLE_ID))
    + sys.getsizeof(Position(_SAMPLE_ID, _SAMPLE_ID))
    + 2 * sys.getsizeof(_SAMPLE_ID)
    + sys.getsizeof(b"")
    + 16
    + 15
)
# Bytes a cached chunk costs besides its entries: its records in the global
# order and in its ledger's (tuples, deque slots, its time and sequence).
CHUNK_OVERHEAD = 256

_GONE = Entry(Position(-1, -1), b"", 0)

# The slowest read position of a ledger's active cursors; None: nobody reads.
ReadFloor = Callable[[], Position | None]


class EntryCacheManager:
    """Holds the budget, the time threshold and the global insertion order."""

    def __init__(
        self,
        budget: int,
        time_threshold_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.budget = budget
        self.time_threshold_s = time_threshold_s
        self._clock = clock
        self.size = 0
        # (cache, cache generation, chunk sequence, bytes, time added) per chunk.
        self._chunks: deque[tuple[LedgerCache, int, int, int, float]] = deque()
        self._stale = 0
        # Caches holding something, for the periodic sweep.
        self._holding: set[LedgerCache] = set()

    def sweep_interval(self) -> float:
        """How long the factory's task waits before the next :meth:`evict`.

        A tenth of the threshold, so an entry stays at most 1.1 times it. An
        empty cache is looked at once a threshold instead (each wake-up of
        an idle broker cost about 200 us of CPU on a virtual machine, at
        ten a second): an entry added right after such a look is not old
        enough to go at the next one, which is back to the short step."""
        busy = min(1.0, max(0.01, self.time_threshold_s / 10))
        if self._chunks or self._holding:
            return busy
        return max(busy, min(1.0, self.time_threshold_s))

    def new_cache(self, ledger_id: int, read_floor: ReadFloor | None = None) -> LedgerCache:
        return LedgerCache(self, ledger_id, read_floor)

    def evict(self) -> None:
        """The periodic sweep (the factory's task): chunks past the time
        threshold, then chunks every active cursor has read."""
        deadline = self._clock() - self.time_threshold_s
        chunks = self._chunks
        while chunks and chunks[0][4] <= deadline:
            self._pop_oldest()
        for cache in list(self._holding):
            cache.evict_read()

    def _record(self, cache: LedgerCache, seq: int, nbytes: int) -> None:
        self.size += nbytes
        self._holding.add(cache)
        self._chunks.append((cache, cache.generation, seq, nbytes, self._clock()))
        while self.size > self.budget and self._chunks:
            self._pop_oldest()

    def _pop_oldest(self) -> None:
        victim, gen, seq, _b, _t = self._chunks.popleft()
        if victim.generation == gen and seq == victim._front_seq:
            victim._drop_front_chunk()
        else:
            self._stale -= 1

    def _dropped(self, nbytes: int, chunks: int, empty: bool, cache: LedgerCache) -> None:
        """A cache let go of ``chunks`` chunks by itself (read, cleared): their
        bytes leave the budget, their records in the global order go stale."""
        self.size -= nbytes
        self._stale += chunks
        if empty:
            self._holding.discard(cache)
        if self._stale > 1024 and self._stale * 2 > len(self._chunks):
            self._chunks = deque(
                c for c in self._chunks if c[0].generation == c[1] and c[2] >= c[0]._front_seq
            )
            self._stale = 0


class LedgerCache:
    """Cached entries ``first_entry_id ..`` of one ledger, contiguous."""

    __slots__ = (
        "_bytes",
        "_chunk_sizes",
        "_entries",
        "_front_seq",
        "_head",
        "_manager",
        "_read_floor",
        "generation",
        "ledger_id",
    )

    def __init__(
        self, manager: EntryCacheManager, ledger_id: int, read_floor: ReadFloor | None = None
    ) -> None:
        self._manager = manager
        self.ledger_id = ledger_id
        self._read_floor = read_floor
        self._entries: list[Entry] = []
        self._head = 0
        self._bytes = 0
        # (entries, bytes) of each cached chunk, oldest first; the oldest
        # one's sequence number is _front_seq.
        self._chunk_sizes: deque[tuple[int, int]] = deque()
        self._front_seq = 0
        self.generation = 0

    @property
    def first_entry_id(self) -> int:
        """Entry id of the oldest cached entry (meaningless when empty)."""
        if self._head < len(self._entries):
            return self._entries[self._head].position.entry_id
        return -1

    @property
    def used_bytes(self) -> int:
        """What the cached entries cost, as the budget counts it."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries) - self._head

    def append(self, entries: list[Entry], nbytes: int) -> None:
        """Add a group just written (contiguous with what is cached, or it
        resets); ``nbytes``: its data bytes. Chunks every active cursor has
        read leave first."""
        manager = self._manager
        if not entries or manager.budget == 0:
            return
        if len(self):
            if entries[0].position.entry_id != self._entries[-1].position.entry_id + 1:
                self.clear()
            else:
                self.evict_read()
        cost = nbytes + len(entries) * ENTRY_OVERHEAD + CHUNK_OVERHEAD
        self._entries.extend(entries)
        self._bytes += cost
        self._chunk_sizes.append((len(entries), cost))
        manager._record(self, self._front_seq + len(self._chunk_sizes) - 1, cost)

    def get_range(self, entry_id: int, count: int) -> list[Entry]:
        """Cached entries from ``entry_id`` (at most ``count``); [] if not cached."""
        if self._head >= len(self._entries):
            return []
        i = entry_id - self._entries[self._head].position.entry_id
        if i < 0 or self._head + i >= len(self._entries):
            return []
        start = self._head + i
        return self._entries[start : start + count]

    def get(self, entry_id: int) -> Entry | None:
        got = self.get_range(entry_id, 1)
        return got[0] if got else None

    def evict_read(self) -> None:
        """Drop the chunks every active cursor has read past (no cursor
        active: the ledger clears its caches itself)."""
        floor = self._read_floor() if self._read_floor is not None else None
        if floor is None or self._head >= len(self._entries):
            return
        if floor[0] > self.ledger_id:
            self.clear()
            return
        if floor[0] < self.ledger_id:
            return
        # Whole chunks whose last entry is before the floor.
        first = self._entries[self._head].position.entry_id
        sizes = self._chunk_sizes
        count = nbytes = chunks = 0
        for n, b in sizes:
            if first + count + n > floor[1]:
                break
            count += n
            nbytes += b
            chunks += 1
        if not chunks:
            return
        for _ in range(chunks):
            sizes.popleft()
        self._front_seq += chunks
        self._advance(count, nbytes)
        self._manager._dropped(nbytes, chunks, not sizes, self)

    def clear(self) -> None:
        """Drop everything (trim, close, read by all). Stale chunks are skipped
        by the manager."""
        if self._entries:
            self._manager._dropped(self._bytes, len(self._chunk_sizes), True, self)
        self._entries = []
        self._head = 0
        self._bytes = 0
        self._chunk_sizes.clear()
        self._front_seq = 0
        self.generation += 1

    def _drop_front_chunk(self) -> None:
        """The manager's eviction (age, budget): the oldest chunk goes."""
        count, nbytes = self._chunk_sizes.popleft()
        self._front_seq += 1
        self._advance(count, nbytes)
        self._manager.size -= nbytes
        if not self._chunk_sizes:
            self._manager._holding.discard(self)

    def _advance(self, count: int, nbytes: int) -> None:
        head = self._head
        # The slots let go of what they held at once, not at the next compaction.
        self._entries[head : head + count] = [_GONE] * count
        self._head = head + count
        self._bytes -= nbytes
        # Compact once the dead prefix dominates, to keep memory bounded.
        if self._head >= len(self._entries):
            self._entries = []
            self._head = 0
        elif self._head > 4096 and self._head * 2 > len(self._entries):
            del self._entries[: self._head]
            self._head = 0
