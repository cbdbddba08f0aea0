"""The ledgers of one managed ledger: ids in order, files, caches, and position math.

Everything here runs on the event loop thread and never blocks: it answers
"what comes after this position", "how many entries/messages between these",
"where does this position live", from the in-memory index of each ledger file.
Also the JSON form of the managed ledger's metadata record.
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass

from magnetar.broker.storage.api import Position
from magnetar.broker.storage.cache import LedgerCache
from magnetar.broker.storage.segment import LedgerFile


@dataclass(slots=True)
class LedgerInfo:
    """One ledger: its file (with index) and cache; ``closed_at`` once rolled over."""

    ledger_id: int
    file: LedgerFile
    cache: LedgerCache
    closed_at: float | None = None

    @property
    def entry_count(self) -> int:
        return len(self.file.offsets) - 1


class LedgerLayout:
    """Ledger ids (ascending) -> :class:`LedgerInfo`; the last one is current."""

    __slots__ = ("_by_id", "_ids")

    def __init__(self) -> None:
        self._ids: list[int] = []
        self._by_id: dict[int, LedgerInfo] = {}

    # ----------------------------------------------------------------- membership

    def append(self, info: LedgerInfo) -> None:
        if self._ids and info.ledger_id <= self._ids[-1]:
            raise ValueError("ledger ids must grow")
        self._ids.append(info.ledger_id)
        self._by_id[info.ledger_id] = info

    def restore_front(self, infos: list[LedgerInfo]) -> None:
        """Put back ledgers taken off the front (a trim that could not be stored)."""
        for info in infos:
            self._by_id[info.ledger_id] = info
        self._ids[:0] = [i.ledger_id for i in infos]

    def remove(self, ledger_id: int) -> LedgerInfo:
        info = self._by_id.pop(ledger_id)
        self._ids.remove(ledger_id)
        return info

    def get(self, ledger_id: int) -> LedgerInfo | None:
        return self._by_id.get(ledger_id)

    @property
    def ids(self) -> list[int]:
        return self._ids

    def infos(self) -> list[LedgerInfo]:
        return [self._by_id[i] for i in self._ids]

    @property
    def current(self) -> LedgerInfo:
        return self._by_id[self._ids[-1]]

    def __len__(self) -> int:
        return len(self._ids)

    # ---------------------------------------------------------------- position math

    def exists(self, position: Position) -> bool:
        info = self._by_id.get(position[0])
        return info is not None and 0 <= position[1] < len(info.file.offsets) - 1

    def next_position(self, position: Position) -> Position:
        ledger_id, entry_id = position
        info = self._by_id.get(ledger_id)
        if info is not None and (
            entry_id + 1 < len(info.file.offsets) - 1 or ledger_id == self._ids[-1]
        ):
            return Position(ledger_id, entry_id + 1)
        i = bisect.bisect_right(self._ids, ledger_id)
        if i < len(self._ids):
            return Position(self._ids[i], 0)
        return Position(ledger_id, entry_id + 1)

    def previous_position(self, position: Position) -> Position:
        ledger_id, entry_id = position
        if entry_id > 0:
            return Position(ledger_id, entry_id - 1)
        i = bisect.bisect_left(self._ids, ledger_id) - 1
        while i >= 0:
            prev = self._by_id[self._ids[i]]
            if prev.entry_count:
                return Position(prev.ledger_id, prev.entry_count - 1)
            i -= 1
        return Position(ledger_id, -1)

    def normalize(self, position: Position) -> Position:
        """The first existing-or-future position at or after ``position``."""
        ledger_id, entry_id = position
        info = self._by_id.get(ledger_id)
        if info is not None:
            if entry_id < 0:
                entry_id = 0
            if entry_id < info.entry_count or ledger_id == self._ids[-1]:
                return Position(ledger_id, entry_id)
        i = bisect.bisect_right(self._ids, ledger_id)
        if i < len(self._ids):
            return Position(self._ids[i], 0)
        return Position(ledger_id, entry_id)

    def count_entries(self, first: Position, last: Position) -> int:
        if last < first:
            return 0
        ids = self._ids
        total = 0
        i = bisect.bisect_left(ids, first[0])
        while i < len(ids) and ids[i] <= last[0]:
            info = self._by_id[ids[i]]
            lo = first[1] if ids[i] == first[0] else 0
            hi = last[1] if ids[i] == last[0] else info.entry_count - 1
            lo = max(lo, 0)
            hi = min(hi, info.entry_count - 1)
            if hi >= lo:
                total += hi - lo + 1
            i += 1
        return total

    def count_messages(self, first: Position, last: Position) -> int:
        if last < first:
            return 0
        ids = self._ids
        total = 0
        i = bisect.bisect_left(ids, first[0])
        while i < len(ids) and ids[i] <= last[0]:
            info = self._by_id[ids[i]]
            cum = info.file.cum_messages
            n = len(cum) - 1
            lo = first[1] if ids[i] == first[0] else 0
            hi = last[1] if ids[i] == last[0] else n - 1
            lo = max(lo, 0)
            hi = min(hi, n - 1)
            if hi >= lo:
                total += cum[hi + 1] - cum[lo]
            i += 1
        return total

    def positions_between(self, first: Position, last: Position) -> list[tuple[int, int, int]]:
        """``(ledger_id, first_entry, last_entry)`` spans of entries in ``[first, last]``."""
        spans: list[tuple[int, int, int]] = []
        ids = self._ids
        i = bisect.bisect_left(ids, first[0])
        while i < len(ids) and ids[i] <= last[0]:
            info = self._by_id[ids[i]]
            lo = max(first[1] if ids[i] == first[0] else 0, 0)
            hi = min(last[1] if ids[i] == last[0] else info.entry_count - 1, info.entry_count - 1)
            if hi >= lo:
                spans.append((ids[i], lo, hi))
            i += 1
        return spans


# ------------------------------------------------------------------ metadata record


@dataclass(slots=True)
class LedgerRecord:
    """What the metadata store keeps for one ledger of a managed ledger."""

    ledger_id: int
    # Known once closed (rolled over); -1 for the current ledger.
    entries: int = -1
    size: int = -1
    closed_at: float | None = None


def encode_ledger_list(records: list[LedgerRecord]) -> bytes:
    """The JSON json.dumps(..., separators=(",", ":")) wrote, formatted
    directly: every new topic stores one (json.dumps took 8 us of the 20 a
    new ledger's record cost the event loop, issue 43)."""
    ledgers = ",".join(
        f'{{"id":{int(r.ledger_id)},"entries":{int(r.entries)},"size":{int(r.size)},'
        f'"closed_at":{"null" if r.closed_at is None else json.dumps(r.closed_at)}}}'
        for r in records
    )
    return f'{{"format":1,"ledgers":[{ledgers}]}}'.encode()


def decode_ledger_list(data: bytes) -> list[LedgerRecord]:
    body = json.loads(data)
    return [
        LedgerRecord(int(d["id"]), int(d["entries"]), int(d["size"]), d.get("closed_at"))
        for d in body["ledgers"]
    ]
