"""Entry cache: recently written entries, per ledger, under one shared byte budget.

Each ledger's cache is a contiguous window of entry ids (a list plus a head
index), so a read of n cached entries is one list slice. Eviction is FIFO over
the groups appended (oldest written first) across every ledger of a factory.
"""

from __future__ import annotations

from collections import deque

from magnetar.broker.storage.api import Entry


class EntryCacheManager:
    """Holds the byte budget and the global insertion order."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.size = 0
        # (cache, cache generation, entry count, bytes) per appended group.
        self._chunks: deque[tuple[LedgerCache, int, int, int]] = deque()
        self._stale = 0

    def new_cache(self, ledger_id: int) -> LedgerCache:
        return LedgerCache(self, ledger_id)

    def _record(self, cache: LedgerCache, count: int, nbytes: int) -> None:
        self.size += nbytes
        self._chunks.append((cache, cache.generation, count, nbytes))
        while self.size > self.budget and self._chunks:
            victim, gen, n, b = self._chunks.popleft()
            if victim.generation == gen:
                victim._drop_front(n, b)
                self.size -= b
            else:
                self._stale -= 1

    def _forget(self, nbytes: int, chunks: int) -> None:
        """A cache was cleared: its bytes leave the budget, its chunks go stale."""
        self.size -= nbytes
        self._stale += chunks
        if self._stale > 1024 and self._stale * 2 > len(self._chunks):
            self._chunks = deque(c for c in self._chunks if c[0].generation == c[1])
            self._stale = 0


class LedgerCache:
    """Cached entries ``first_entry_id ..`` of one ledger, contiguous."""

    __slots__ = ("_bytes", "_chunks", "_entries", "_head", "_manager", "generation", "ledger_id")

    def __init__(self, manager: EntryCacheManager, ledger_id: int) -> None:
        self._manager = manager
        self.ledger_id = ledger_id
        self._entries: list[Entry] = []
        self._head = 0
        self._bytes = 0
        self._chunks = 0
        self.generation = 0

    @property
    def first_entry_id(self) -> int:
        """Entry id of the oldest cached entry (meaningless when empty)."""
        if self._head < len(self._entries):
            return self._entries[self._head].position.entry_id
        return -1

    def __len__(self) -> int:
        return len(self._entries) - self._head

    def append(self, entries: list[Entry], nbytes: int) -> None:
        """Add a group just written (contiguous with what is cached, or it resets)."""
        if not entries or self._manager.budget == 0:
            return
        if len(self) and (entries[0].position.entry_id != self._entries[-1].position.entry_id + 1):
            self.clear()
        self._entries.extend(entries)
        self._bytes += nbytes
        self._chunks += 1
        self._manager._record(self, len(entries), nbytes)

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

    def clear(self) -> None:
        """Drop everything (trim, close). Stale chunks are skipped by the manager."""
        if self._entries:
            self._manager._forget(self._bytes, self._chunks)
        self._entries = []
        self._head = 0
        self._bytes = 0
        self._chunks = 0
        self.generation += 1

    def _drop_front(self, count: int, nbytes: int) -> None:
        self._head += count
        self._bytes -= nbytes
        self._chunks -= 1
        # Compact once the dead prefix dominates, to keep memory bounded.
        if self._head >= len(self._entries):
            self._entries = []
            self._head = 0
        elif self._head > 4096 and self._head * 2 > len(self._entries):
            del self._entries[: self._head]
            self._head = 0
