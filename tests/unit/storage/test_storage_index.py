"""Sealed ledgers' indexes on disk (issue 50): a ledger that takes no more
appends keeps its entry index in an index file beside it, mapped a bounded
number at once, so the broker's memory does not grow with the backlog; reads
at any position, counts and byte bounds answer as before, and an open finds
the index instead of scanning the ledger file (SEM-5.1, 5.5)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from magnetar.broker.storage import (
    FileManagedLedgerFactory,
    InitialPosition,
    ManagedLedgerConfig,
    Position,
    SyncPolicy,
)
from magnetar.broker.storage.index_file import MIN_INDEXED_ENTRIES, IndexMaps, PagedIndex
from magnetar.broker.storage.ledger import ManagedLedgerImpl
from magnetar.broker.storage.segment import LedgerFile
from magnetar.broker.storage.tail_index import SPILL_AT, SPILL_BLOCK, TailIndex
from tests.support.polling import eventually_async
from tests.unit.storage.storage_support import Clock

NAME = "public/default/persistent/indexed"
# Rolls over after about 4,500 records of 8-byte entries.
CONFIG = ManagedLedgerConfig(sync_policy=SyncPolicy.NONE, max_segment_size=100_000)


def _has_index(log_path: str) -> bool:
    return os.path.exists(log_path.removesuffix(".log") + ".idx")


def _first_indexed(directory: str) -> str:
    found = sorted(Path(directory).glob("*.idx"))
    assert found
    return str(found[0]).removesuffix(".idx") + ".log"


def _has_part(log_path: str) -> bool:
    return os.path.exists(log_path.removesuffix(".log") + ".idx.part")


def _file_size(path: str) -> int:
    return os.path.getsize(path)


def _cut(path: str, nbytes: int) -> None:
    os.truncate(path, os.path.getsize(path) - nbytes)


async def _open(f: FileManagedLedgerFactory) -> ManagedLedgerImpl:
    """The ledger, with a subscription that keeps everything from trimming."""
    ml = await f.open_impl(NAME)
    await ml.open_cursor("keep", InitialPosition.EARLIEST)
    return ml


async def _fill(ml: ManagedLedgerImpl, count: int) -> list[Position]:
    positions: list[Position] = []
    for start in range(0, count, 500):
        batch = [
            ml.add_entry(b"e%07d" % i, num_messages=1 + i % 3)
            for i in range(start, min(count, start + 500))
        ]
        positions += await asyncio.gather(*batch)
    return positions


async def _sealed(ml: ManagedLedgerImpl) -> list[int]:
    """Ids of the ledgers whose index is their file, once sealing settled."""
    closed = [i for i in ml.layout.infos() if i is not ml.layout.current]

    def big_ones_sealed() -> bool:
        return all(i.file.sealed_index for i in closed if i.file.entry_count >= MIN_INDEXED_ENTRIES)

    await eventually_async("the sealed ledgers' index files", big_ones_sealed)
    return [i.ledger_id for i in closed if i.file.sealed_index]


async def test_a_sealed_ledger_answers_from_its_index_file(tmp_path: Path) -> None:
    f = await FileManagedLedgerFactory.create(str(tmp_path), CONFIG)
    try:
        ml = await _open(f)
        positions = await _fill(ml, 12_000)
        sealed = await _sealed(ml)
        assert len(sealed) >= 2
        info = ml.layout.get(sealed[0])
        assert info is not None and isinstance(info.file.offsets, PagedIndex)
        assert _has_index(info.file.path)
        # Reads anywhere: inside a sealed ledger, across its end, from the current one.
        for k in (0, 1, 4095, 4500, 7000, 11_990):
            got = await ml.read_entries(positions[k], 20)
            want = list(range(k, min(k + 20, len(positions))))
            assert [e.data for e in got] == [b"e%07d" % i for i in want]
            assert [e.position for e in got] == [positions[i] for i in want]
            assert [e.num_messages for e in got] == [1 + i % 3 for i in want]
        # A byte bound inside a sealed ledger (records of 8 + 12 bytes).
        assert len(await ml.read_entries(positions[100], 50, max_bytes=200)) == 10
        assert ml.number_of_entries == 12_000
        assert ml.number_of_messages == sum(1 + i % 3 for i in range(12_000))
        assert ml.layout.count_messages(positions[10], positions[9000]) == sum(
            1 + i % 3 for i in range(10, 9001)
        )
        assert ml.total_size == 12_000 * 8
    finally:
        await f.close()


async def test_an_open_maps_the_index_instead_of_scanning(tmp_path: Path) -> None:
    """After a clean close every large ledger, the one being written
    included, has its index file: the next open reads no ledger file."""
    f = await FileManagedLedgerFactory.create(str(tmp_path), CONFIG)
    ml = await _open(f)
    positions = await _fill(ml, 10_000)
    current = ml.layout.current.file.path
    await f.close()
    assert _has_index(current)

    f = await FileManagedLedgerFactory.create(str(tmp_path), CONFIG)
    try:
        ml = await _open(f)
        big = [i for i in ml.layout.infos() if i.entry_count >= MIN_INDEXED_ENTRIES]
        assert big and all(i.file.sealed_index for i in big)
        # The ledger that was being written lost its preallocated zeros.
        was_current = next(i for i in big if i.file.path == current)
        assert _file_size(current) == was_current.file.size
        assert ml.number_of_entries == 10_000
        got = await ml.read_entries(positions[9_990], 20)
        assert [e.data for e in got] == [b"e%07d" % i for i in range(9_990, 10_000)]
        later = await ml.add_entry(b"later")
        assert later.ledger_id > positions[-1].ledger_id
    finally:
        await f.close()


async def test_an_index_that_does_not_match_its_ledger_is_not_used(tmp_path: Path) -> None:
    """A cut index file, or a ledger file with a record past the index's end:
    the open scans the ledger file and finds every record."""
    f = await FileManagedLedgerFactory.create(str(tmp_path), CONFIG)
    ml = await _open(f)
    await _fill(ml, 5_000)
    await f.close()
    log_path = _first_indexed(ml.dir)
    maps = IndexMaps()

    lf, _, _ = LedgerFile.open_existing(log_path, 0, False, -1, maps)
    entries = lf.entry_count
    assert lf.sealed_index
    lf.close()
    # Truncated: not used; the scan writes a good one again.
    _cut(log_path.removesuffix(".log") + ".idx", 8)
    lf, _, _ = LedgerFile.open_existing(log_path, 0, False, -1, maps)
    assert lf.entry_count == entries and lf.sealed_index
    lf.close()
    # A record after the indexed ones (a write the index never saw): scanned.
    lf, _, _ = LedgerFile.open_existing(log_path, 0, False, -1, None)
    end = lf.write_end
    lf.append([b"extra"], [1], True)
    lf.close()
    os.truncate(log_path, end + 12 + 5)  # no preallocated zeros after it
    lf, _, _ = LedgerFile.open_existing(log_path, 0, True, -1, maps)
    assert lf.entry_count == entries + 1
    assert lf.read(entries, lf.offsets[entries : entries + 2])[0].data == b"extra"
    lf.close()


async def test_mapped_indexes_are_bounded(tmp_path: Path) -> None:
    """However many sealed ledgers are read, at most the bound are mapped."""
    f = await FileManagedLedgerFactory.create(str(tmp_path), CONFIG)
    try:
        ml = await _open(f)
        f._ctx.indexes = maps = IndexMaps(capacity=1)
        positions = await _fill(ml, 20_000)
        sealed = await _sealed(ml)
        assert len(sealed) >= 3
        for k in range(0, 20_000, 1_700):
            got = await ml.read_entries(positions[k], 3)
            assert [e.data for e in got] == [b"e%07d" % i for i in range(k, k + 3)]
            assert len(maps) <= 1
        mapped = [
            i.ledger_id
            for i in ml.layout.infos()
            if isinstance(i.file.offsets, PagedIndex) and i.file.offsets.mapped
        ]
        assert len(mapped) <= 1
    finally:
        await f.close()


async def test_a_ledger_rolls_over_at_its_entry_limit_once_old_enough(tmp_path: Path) -> None:
    """managed_ledger_max_entries_per_ledger (Pulsar's
    managedLedgerMaxEntriesPerLedger) bounds the index held in memory, once
    the ledger is older than the minimum rollover time (Pulsar's
    managedLedgerMinLedgerRolloverTimeMinutes): before that a topic keeps
    what it was sent, subscription or not."""
    clock = Clock()
    f = await FileManagedLedgerFactory.create(
        str(tmp_path),
        ManagedLedgerConfig(
            sync_policy=SyncPolicy.NONE, max_entries_per_ledger=300, min_rollover_time_s=600.0
        ),
        clock=clock,
    )
    try:
        ml = await f.open_impl(NAME)  # no subscription
        early = await _fill(ml, 1000)
        assert len({p.ledger_id for p in early}) == 1
        assert len(await ml.read_entries(early[0], 1000)) == 1000
        clock.now += 601
        await ml.open_cursor("keep", InitialPosition.EARLIEST)
        positions = early + await _fill(ml, 1000)
        assert len({p.ledger_id for p in positions}) > 1
        clock.now += 601
        positions += await _fill(ml, 1000)
        # Past the first ledger, at most one entry-limited ledger per 600 s.
        counts = [i.entry_count for i in ml.layout.infos()]
        assert sum(counts) == 3000 and max(counts[1:]) <= 1000
        got = await ml.read_entries(positions[2250], 100)
        assert [e.data for e in got] == [b"e%07d" % (i - 2000) for i in range(2250, 2350)]
    finally:
        await f.close()


async def test_the_ledger_being_written_keeps_only_its_tail_in_memory(tmp_path: Path) -> None:
    """Within the minimum rollover time a busy topic writes many entries to
    one ledger: past SPILL_AT, all but the tail of its index go to the part
    file, reads anywhere still answer, and sealing turns it into the index
    file (the part file goes)."""
    f = await FileManagedLedgerFactory.create(
        str(tmp_path), ManagedLedgerConfig(sync_policy=SyncPolicy.NONE)
    )
    try:
        ml = await _open(f)
        positions = await _fill(ml, 3 * SPILL_AT + 123)
        lf = ml.layout.current.file
        assert len({p.ledger_id for p in positions}) == 1
        assert isinstance(lf.offsets, TailIndex) and isinstance(lf.cum_messages, TailIndex)
        assert len(lf.offsets.tail) <= SPILL_AT + 1
        assert _has_part(lf.path)
        n = len(positions)
        for k in (0, 1, SPILL_BLOCK - 1, SPILL_BLOCK, 2 * SPILL_AT - 5, n - 10):
            got = await ml.read_entries(positions[k], 20)
            want = list(range(k, min(k + 20, n)))
            assert [e.data for e in got] == [b"e%07d" % i for i in want]
            assert [e.num_messages for e in got] == [1 + i % 3 for i in want]
        assert ml.layout.count_messages(positions[7], positions[n - 3]) == sum(
            1 + i % 3 for i in range(7, n - 2)
        )
        assert ml.number_of_messages == sum(1 + i % 3 for i in range(n))
        # Sealed: the index file takes over and the part file goes.
        index = await ml.run_blocking(lf.seal_index, f._ctx.indexes)
        assert index is not None
        lf.adopt_index(index)
        assert lf.sealed_index and not _has_part(lf.path)
        got = await ml.read_entries(positions[SPILL_BLOCK + 3], 5)
        assert [e.data for e in got] == [
            b"e%07d" % i for i in range(SPILL_BLOCK + 3, SPILL_BLOCK + 8)
        ]
    finally:
        await f.close()
