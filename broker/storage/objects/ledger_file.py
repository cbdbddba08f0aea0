"""ObjectLedgerFile: a ledger whose records live in round objects.

It is a LedgerFile to everything above (the writer, the layout, the cursors,
the cache see the same index of record offsets), with the records' bytes in
the object store: a write only moves the end (the round object already holds
the bytes), a read fetches the object ranges that the ledger's extents name
and checks every record's checksum. There is no descriptor, nothing to sync,
no preallocation.
"""

from __future__ import annotations

import asyncio
from array import array

from magnetar.broker.storage.api import Entry
from magnetar.broker.storage.objects.extents import Extent, ExtentMap
from magnetar.broker.storage.objects.read_ahead import ReadAhead
from magnetar.broker.storage.objects.store import ObjectCorrupt, ObjectStore
from magnetar.broker.storage.records import CorruptEntryError, ScanResult, decode_range
from magnetar.broker.storage.segment import LedgerFile

# Ranges of one window fetched at once: an unsealed ledger's window spans
# as many round objects as rounds wrote it, each a GET.
MAX_PARALLEL_GETS = 32


class ObjectLedgerFile(LedgerFile):
    """One ledger id on object storage; ``path`` names it for messages only."""

    __slots__ = ("extent_path", "extents", "fence", "read_ahead", "store")

    remote = True

    def __init__(
        self,
        store: ObjectStore,
        name: str,
        ledger_id: int,
        extent_path: str,
        fence: tuple[str, int],
        read_ahead: ReadAhead,
        extents: ExtentMap | None = None,
    ) -> None:
        extents = extents if extents is not None else ExtentMap()
        offsets, cum = extents.index()
        super().__init__(f"{name}/{ledger_id}", ledger_id, -1, ScanResult(offsets, cum, False))
        self.store = store
        self.read_ahead = read_ahead
        self.extents = extents
        # The metadata node under which this ledger's extents are committed,
        # and the owner's fence (node, version) every commit checks.
        self.extent_path = extent_path
        self.fence = fence

    def add_extent(self, extent: Extent) -> None:
        """A round holding this ledger's records is committed (loop thread,
        before the writer extends the index with the same records)."""
        self.extents.append(extent)

    # ------------------------------------------------------------------ reads

    async def fetch(self, first_entry_id: int, offsets: array[int]) -> list[Entry]:
        base, end = offsets[0], offsets[-1]
        buf, start = await self.read_ahead.read(self, base, end, self.extents.end, self._get)
        try:
            return decode_range(buf, self.ledger_id, first_entry_id, offsets, start)
        except CorruptEntryError as exc:
            self.read_ahead.drop(self)
            keys = ", ".join(sorted({p[0] for p in self.extents.ranges(base, end)}))
            raise ObjectCorrupt(f"{exc} in object(s) {keys}") from exc

    async def _get(self, start: int, stop: int) -> bytes:
        pieces = self.extents.ranges(start, stop)
        sem = asyncio.Semaphore(MAX_PARALLEL_GETS)

        async def get(key: str, at: int, length: int) -> bytes:
            async with sem:
                return await self.store.get_range(key, at, length)

        chunks = await asyncio.gather(*(get(*p) for p in pieces))
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def read(self, first_entry_id: int, offsets: array[int]) -> list[Entry]:
        raise NotImplementedError(f"{self.path} is on object storage: use fetch")

    # ------------------------------------------------------------------ writes

    def write_records(self, parts: list[bytes], ends: array[int], sync: bool) -> array[int]:
        """The round object holds the bytes: only the end moves."""
        self._write_end = ends[-1]
        return ends

    def extend_index(self, ends: array[int], nmsgs: list[int]) -> None:
        """As a file's, without spilling to a local file: the arrays stay in
        memory (16 bytes an entry, bounded by the ledger's entry limit)."""
        offsets, cum = self.offsets, self.cum_messages
        assert isinstance(offsets, array) and isinstance(cum, array), "never paged here"
        offsets.extend(ends)
        total = cum[-1]
        for nm in nmsgs:
            total += nm
            cum.append(total)

    def cut_back(self, end: int) -> None:
        self._write_end = end

    # ------------------------------------------------- what a local file needs

    def needs_preallocation(self) -> bool:
        return False

    def preallocate_ahead(self) -> None:
        pass

    def trim_tail(self) -> None:
        pass

    def sync(self) -> None:
        pass

    def uncache(self, end: int) -> None:
        pass

    def sync_by_path(self) -> None:
        pass

    def open_fd(self) -> None:
        if self._closed:
            raise OSError(f"{self.path} is closed")

    def release_fd(self) -> None:
        pass

    def close(self) -> None:
        self._closed = True
        self.read_ahead.drop(self)

    def seal_index(self, maps: object) -> None:
        # Sealing rewrites the ledger into one object (not yet): the index
        # stays the arrays rebuilt from the extents.
        return None
