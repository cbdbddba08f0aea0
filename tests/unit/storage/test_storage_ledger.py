"""ManagedLedger: appends, group commit, reads, cache, rollover, recovery, close (SEM-5.1, 5.5)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from magnetar.broker.storage import (
    EARLIEST,
    LATEST,
    FileManagedLedgerFactory,
    ManagedLedgerClosed,
    ManagedLedgerConfig,
    Position,
    StorageError,
    SyncPolicy,
)
from magnetar.broker.storage.cache import CHUNK_OVERHEAD, ENTRY_OVERHEAD
from magnetar.broker.storage.ledger import ManagedLedgerImpl
from magnetar.broker.storage.metadata import SqliteMetadataStore
from magnetar.broker.storage.segment import (
    FIRST_PREALLOCATION_STEP,
    IDLE_PREALLOCATION_STEP,
    PREALLOCATION_STEP,
    SYNCFS_MIN_FILES,
    syncfs_available,
)
from tests.support.fds import open_files_under
from tests.support.polling import eventually_async

NAME = "public/default/persistent/t"


async def _open(factory: FileManagedLedgerFactory, **config: Any) -> ManagedLedgerImpl:
    return await factory.open_impl(NAME, ManagedLedgerConfig(**config) if config else None)


async def test_positions_grow_from_zero_and_entries_read_back(
    factory: FileManagedLedgerFactory,
) -> None:
    """SEM-5.1: positions are (ledger_id, entry_id), entry ids from 0, ordered."""
    ml = await _open(factory)
    assert ml.last_confirmed_position.entry_id == -1
    positions = [await ml.add_entry(b"m%d" % i, num_messages=i + 1) for i in range(5)]
    lid = positions[0].ledger_id
    assert positions == [Position(lid, i) for i in range(5)]
    assert ml.last_confirmed_position == positions[-1]
    entries = await ml.read_entries(positions[0], 10)
    assert [e.data for e in entries] == [b"m%d" % i for i in range(5)]
    assert [e.num_messages for e in entries] == [1, 2, 3, 4, 5]
    assert ml.number_of_entries == 5
    assert ml.number_of_messages == 15
    assert ml.total_size == sum(len(b"m%d" % i) for i in range(5))
    assert ml.first_position == positions[0]


async def test_concurrent_appends_are_group_committed_in_order(
    factory: FileManagedLedgerFactory,
) -> None:
    """Appends arriving during a write go into the next write; receipts in order."""
    ml = await _open(factory)
    resolved: list[int] = []

    async def add(i: int) -> Position:
        pos = await ml.add_entry(b"%d" % i)
        resolved.append(i)
        return pos

    positions = await asyncio.gather(*[add(i) for i in range(300)])
    assert positions == sorted(positions)
    assert len(set(positions)) == 300
    assert resolved == list(range(300))
    assert ml.stats.entries_written == 300
    assert ml.stats.groups_written < 30
    entries = await ml.read_entries(positions[0], 1000)
    assert [e.data for e in entries] == [b"%d" % i for i in range(300)]


async def test_the_entries_listener_hears_each_group_once_before_its_awaits(
    factory: FileManagedLedgerFactory,
) -> None:
    """The topic's wake-up of its dispatchers: one call per group commit with
    its entry count and bytes, made when the entries are readable and before
    any append's awaitable completes."""
    ml = await _open(factory)
    heard: list[tuple[int, int, bool, Position]] = []
    futures: list[asyncio.Future[Position]] = []

    def listener(count: int, nbytes: int) -> None:
        heard.append((count, nbytes, any(f.done() for f in futures), ml.last_confirmed_position))

    ml.set_entries_listener(listener)
    futures.extend(ml.add_entry(b"x" * (i + 1)) for i in range(200))
    positions = await asyncio.gather(*futures)
    assert sum(count for count, *_ in heard) == 200
    assert sum(nbytes for _, nbytes, *_ in heard) == sum(range(1, 201))
    assert len(heard) == ml.stats.groups_written < 200
    assert not heard[0][2]  # nothing was answered before the first group was heard
    assert heard[-1][3] == positions[-1]
    ml.set_entries_listener(None)
    await ml.add_entry(b"after")
    assert sum(count for count, *_ in heard) == 200


@pytest.mark.parametrize("policy", list(SyncPolicy))
async def test_every_sync_policy_stores_and_recovers(tmp_path: Path, policy: SyncPolicy) -> None:
    config = ManagedLedgerConfig(sync_policy=policy, sync_interval_ms=5)
    f = await FileManagedLedgerFactory.create(str(tmp_path), config)
    ml = await f.open(NAME)
    positions = await asyncio.gather(*[ml.add_entry(b"x" * i) for i in range(50)])
    await asyncio.sleep(0.02)
    await f.close()
    f = await FileManagedLedgerFactory.create(str(tmp_path), config)
    try:
        ml = await f.open(NAME)
        entries = await ml.read_entries(positions[0], 100)
        assert [e.data for e in entries] == [b"x" * i for i in range(50)]
    finally:
        await f.close()


async def test_reads_respect_max_entries_and_max_bytes(factory: FileManagedLedgerFactory) -> None:
    ml = await _open(factory)
    first = await ml.add_entry(b"a" * 100)
    for _ in range(9):
        await ml.add_entry(b"a" * 100)
    assert len(await ml.read_entries(first, 3)) == 3
    assert len(await ml.read_entries(first, 10, max_bytes=350)) == 3
    # At least one entry even when it is bigger than max_bytes.
    assert len(await ml.read_entries(first, 10, max_bytes=1)) == 1
    assert await ml.read_entries(ml.next_position(ml.last_confirmed_position), 10) == []
    assert await ml.read_entries(LATEST, 10) == []
    assert len(await ml.read_entries(EARLIEST, 100)) == 10


async def test_recent_entries_come_from_the_cache_and_old_ones_from_disk(
    tmp_path: Path,
) -> None:
    """SEM-5.5: recent entries from memory, older ones from disk."""
    f = await FileManagedLedgerFactory.create(
        str(tmp_path), ManagedLedgerConfig(entry_cache_size=10 * 1000)
    )
    try:
        ml = await f.open_impl(NAME)
        (await ml.open_cursor("reader")).set_active()
        positions = [await ml.add_entry(bytes([i % 256]) * 1000) for i in range(50)]
        assert 0 < f.cache.size <= 10 * 1000
        tail = await ml.read_entries(positions[45], 5)
        assert ml.stats.cache_reads == 1 and ml.stats.disk_reads == 0
        head = await ml.read_entries(positions[0], 5)
        assert ml.stats.disk_reads == 1
        assert [e.data for e in head] == [bytes([i]) * 1000 for i in range(5)]
        assert [e.data for e in tail] == [bytes([i]) * 1000 for i in range(45, 50)]
    finally:
        await f.close()


async def test_cache_budget_is_shared_by_ledgers(tmp_path: Path) -> None:
    f = await FileManagedLedgerFactory.create(
        str(tmp_path), ManagedLedgerConfig(entry_cache_size=5000)
    )
    try:
        a = await f.open("a/b/c/one")
        b = await f.open("a/b/c/two")
        (await a.open_cursor("s")).set_active()
        (await b.open_cursor("s")).set_active()
        for _ in range(10):
            await a.add_entry(b"x" * 1000)
            await b.add_entry(b"y" * 1000)
        assert 4000 <= f.cache.size <= 5000
    finally:
        await f.close()


async def test_entries_are_cached_only_while_a_cursor_is_active(tmp_path: Path) -> None:
    """SEM-5.5 as Pulsar keeps it: a ledger caches what it writes while a
    consumer reads it (an active cursor); with nobody reading, nothing is held,
    and the last cursor going inactive drops what was cached."""
    f = await FileManagedLedgerFactory.create(str(tmp_path), ManagedLedgerConfig())
    try:
        ml = await f.open_impl(NAME)
        cursor = await ml.open_cursor("sub")
        other = ml.new_non_durable_cursor(EARLIEST)
        first = [await ml.add_entry(b"a%d" % i) for i in range(5)]
        assert f.cache.size == 0 and f.cache_used_bytes == 0
        assert [e.data for e in await ml.read_entries(first[0], 5)] == [
            b"a%d" % i for i in range(5)
        ]
        assert ml.stats.disk_reads == 1 and ml.stats.cache_reads == 0

        cursor.set_active()
        other.set_active()
        later = [await ml.add_entry(b"b%d" % i) for i in range(5)]
        assert f.cache_used_bytes == sum(len(b"b%d" % i) for i in range(5)) + 5 * (
            ENTRY_OVERHEAD + CHUNK_OVERHEAD
        )
        assert [e.data for e in await ml.read_entries(later[0], 5)] == [
            b"b%d" % i for i in range(5)
        ]
        assert ml.stats.cache_reads == 1 and ml.stats.disk_reads == 1

        cursor.set_inactive()  # one reader left: the cache stays
        assert f.cache_used_bytes > 0
        await ml.delete_cursor(other.name)  # closing a cursor makes it inactive
        assert not other.is_active and not ml.has_active_cursors
        assert f.cache_used_bytes == 0
        await ml.add_entry(b"c")
        assert f.cache_used_bytes == 0
    finally:
        await f.close()


async def test_read_positions_for_redelivery(factory: FileManagedLedgerFactory) -> None:
    ml = await _open(factory)
    positions = [await ml.add_entry(b"%d" % i) for i in range(10)]
    wanted = [positions[7], positions[2], positions[3], positions[4], positions[0]]
    got = await ml.read_positions([*wanted, Position(999, 0), Position(positions[0][0], 50)])
    assert [e.position for e in got] == wanted
    assert [e.data for e in got] == [b"7", b"2", b"3", b"4", b"0"]


async def test_rollover_by_size_and_reads_across_ledgers(factory: FileManagedLedgerFactory) -> None:
    ml = await _open(factory, max_segment_size=4096)
    sub = await ml.open_cursor("keep")  # holds the ledgers back from trimming
    positions = [await ml.add_entry(bytes([i]) * 1000) for i in range(20)]
    ledgers = sorted({p.ledger_id for p in positions})
    assert len(ledgers) >= 4
    assert ml.stats.rollovers == len(ledgers) - 1
    # Entry ids restart at 0 in each ledger.
    for lid in ledgers:
        ids = [p.entry_id for p in positions if p.ledger_id == lid]
        assert ids == list(range(len(ids)))
    entries = await ml.read_entries(positions[0], 100)
    assert [e.position for e in entries] == positions
    assert ml.next_position(Position(ledgers[0], ids_last(positions, ledgers[0]))) == Position(
        ledgers[1], 0
    )
    assert ml.previous_position(Position(ledgers[1], 0)) == Position(
        ledgers[0], ids_last(positions, ledgers[0])
    )
    assert sub.backlog_entries == 20  # opened at Latest, before the adds
    assert ml.number_of_entries == 20


def _patch_file(path: str, offset: int | None, data: bytes) -> None:
    """Write ``data`` at ``offset`` (None: append), as a crash or bit rot would."""
    with open(path, "r+b") as fh:
        if offset is None:
            fh.seek(0, os.SEEK_END)
        else:
            fh.seek(offset)
        fh.write(data)


def _file_size(path: str) -> int:
    return os.stat(path).st_size


def ids_last(positions: list[Position], lid: int) -> int:
    return max(p.entry_id for p in positions if p.ledger_id == lid)


async def test_reopen_rolls_over_and_keeps_everything(tmp_path: Path) -> None:
    f = await FileManagedLedgerFactory.create(str(tmp_path))
    ml = await f.open(NAME)
    await ml.open_cursor("sub")
    p1 = [await ml.add_entry(b"a%d" % i) for i in range(3)]
    await f.close()
    f = await FileManagedLedgerFactory.create(str(tmp_path))
    try:
        ml = await f.open(NAME)
        assert ml.last_confirmed_position == p1[-1]
        p2 = await ml.add_entry(b"b")
        assert p2.ledger_id > p1[0].ledger_id and p2.entry_id == 0
        entries = await ml.read_entries(EARLIEST, 10)
        assert [e.data for e in entries] == [b"a0", b"a1", b"a2", b"b"]
    finally:
        await f.close()


async def test_empty_ledger_is_dropped_on_reopen(tmp_path: Path) -> None:
    for _ in range(3):
        f = await FileManagedLedgerFactory.create(str(tmp_path))
        ml = await f.open_impl(NAME)
        ids = list(ml.layout.ids)
        await f.close()
    assert len(ids) == 1
    assert ml.last_confirmed_position == Position(ids[0], -1)
    files = os.listdir(os.path.join(str(tmp_path), "ledgers", os.listdir(tmp_path / "ledgers")[0]))
    assert files == [f"{ids[0]}.log"]


async def test_torn_tail_is_cut_on_open_and_appends_continue(tmp_path: Path) -> None:
    f = await FileManagedLedgerFactory.create(str(tmp_path))
    ml = await f.open_impl(NAME)
    positions = [await ml.add_entry(b"entry-%d" % i) for i in range(5)]
    path = ml.layout.current.file.path
    await f.close()
    # A crash mid-write: half a record.
    _patch_file(path, None, b"\x12\x34\x56\x78\x40\x00\x00\x00\x01\x00\x00\x00partial")
    f = await FileManagedLedgerFactory.create(str(tmp_path))
    try:
        ml = await f.open_impl(NAME)
        assert ml.last_confirmed_position == positions[-1]
        entries = await ml.read_entries(positions[0], 100)
        assert [e.data for e in entries] == [b"entry-%d" % i for i in range(5)]
        assert _file_size(path) == sum(12 + len(e.data) for e in entries)
        new = await ml.add_entry(b"after")
        assert (await ml.read_positions([new]))[0].data == b"after"
    finally:
        await f.close()


async def test_corrupt_record_in_a_closed_ledger_is_never_served(tmp_path: Path) -> None:
    f = await FileManagedLedgerFactory.create(
        str(tmp_path), ManagedLedgerConfig(entry_cache_size=0)
    )
    ml = await f.open_impl(NAME)
    await ml.open_cursor("sub")
    first = await ml.add_entry(b"A" * 100)
    await ml.add_entry(b"B" * 100)
    path = ml.layout.current.file.path
    await f.close()
    f = await FileManagedLedgerFactory.create(
        str(tmp_path), ManagedLedgerConfig(entry_cache_size=0)
    )
    try:
        ml = await f.open_impl(NAME)  # that ledger is closed now
        _patch_file(path, 12 + 50, b"Z")  # bit rot after recovery
        with pytest.raises(StorageError):
            await ml.read_entries(first, 1)
    finally:
        await f.close()


async def test_wait_for_entries_after(factory: FileManagedLedgerFactory) -> None:
    ml = await _open(factory)
    p = await ml.add_entry(b"1")
    await asyncio.wait_for(ml.wait_for_entries_after(ml.previous_position(p)), 1)
    waiter = asyncio.ensure_future(ml.wait_for_entries_after(p))
    await asyncio.sleep(0.01)
    assert not waiter.done()
    await ml.add_entry(b"2")
    await asyncio.wait_for(waiter, 1)
    # Cancel-safe: a cancelled wait leaves nothing behind.
    cancelled = asyncio.ensure_future(ml.wait_for_entries_after(ml.last_confirmed_position))
    await asyncio.sleep(0)
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert ml._entry_waiters == []


async def test_close_fails_waiters_and_later_calls(factory: FileManagedLedgerFactory) -> None:
    ml = await _open(factory)
    p = await ml.add_entry(b"1")
    waiter = asyncio.ensure_future(ml.wait_for_entries_after(p))
    await asyncio.sleep(0)
    await ml.close()
    await ml.close()  # idempotent
    with pytest.raises(ManagedLedgerClosed):
        await waiter
    with pytest.raises(ManagedLedgerClosed):
        await ml.add_entry(b"2")
    with pytest.raises(ManagedLedgerClosed):
        await ml.read_entries(p, 1)
    assert ml.is_closed


async def test_close_during_appends_resolves_or_fails_every_receipt(
    factory: FileManagedLedgerFactory,
) -> None:
    ml = await _open(factory)
    adds = [asyncio.ensure_future(ml.add_entry(b"%d" % i)) for i in range(200)]
    await asyncio.sleep(0)
    await ml.close()
    results = await asyncio.gather(*adds, return_exceptions=True)
    ok = [r for r in results if isinstance(r, Position)]
    failed = [r for r in results if isinstance(r, ManagedLedgerClosed)]
    assert len(ok) + len(failed) == 200
    ml2 = await factory.open(NAME)
    stored = await ml2.read_entries(EARLIEST, 1000)
    assert [e.position for e in stored] == ok


async def test_factory_returns_the_same_ledger_and_deletes_it(
    factory: FileManagedLedgerFactory, tmp_path: Path
) -> None:
    a, b = await asyncio.gather(factory.open(NAME), factory.open(NAME))
    assert a is b
    await a.add_entry(b"x")
    await a.open_cursor("sub")
    assert await factory.exists(NAME)
    await a.delete()
    assert not await factory.exists(NAME)
    assert os.listdir(tmp_path / "ledgers") == []
    assert await factory.store.get_children("/managed-ledgers") == []
    fresh = await factory.open(NAME)
    assert await fresh.read_entries(EARLIEST, 10) == []
    assert fresh.cursors == []


async def test_factory_delete_of_a_ledger_not_open(
    factory: FileManagedLedgerFactory, tmp_path: Path
) -> None:
    ml = await factory.open(NAME)
    await ml.add_entry(b"x")
    await ml.close()
    await factory.delete(NAME)
    assert not await factory.exists(NAME)
    assert os.listdir(tmp_path / "ledgers") == []


async def test_data_directory_is_locked(tmp_path: Path) -> None:
    f = await FileManagedLedgerFactory.create(str(tmp_path))
    try:
        with pytest.raises(StorageError):
            await FileManagedLedgerFactory.create(str(tmp_path))
    finally:
        await f.close()
    f = await FileManagedLedgerFactory.create(str(tmp_path))
    await f.close()


async def test_ledger_ids_are_unique_across_ledgers(factory: FileManagedLedgerFactory) -> None:
    mls = [await factory.open(f"t/n/persistent/{i}") for i in range(5)]
    ids = [(await ml.add_entry(b"x")).ledger_id for ml in mls]
    assert len(set(ids)) == 5


async def test_non_bytes_data_is_copied(factory: FileManagedLedgerFactory) -> None:
    ml = await _open(factory)
    buf = bytearray(b"abc")
    p = await ml.add_entry(buf)  # type: ignore[arg-type]
    buf[0] = ord("z")
    assert (await ml.read_positions([p]))[0].data == b"abc"


async def test_groups_are_bounded_and_files_stay_under_the_segment_size(
    factory: FileManagedLedgerFactory,
) -> None:
    ml = await _open(factory, max_segment_size=3 * 1024 * 1024)
    await ml.open_cursor("keep")
    big = b"x" * 100_000
    positions = await asyncio.gather(*[ml.add_entry(big) for _ in range(100)])
    assert ml.stats.groups_written >= 3  # 10 MB queued at once: several writes
    assert all(info.file.size <= 3 * 1024 * 1024 for info in ml.layout.infos())
    assert len({p.ledger_id for p in positions}) >= 4
    assert len(await ml.read_entries(positions[0], 1000, 1 << 30)) == 100


async def test_zeros_are_written_ahead_of_the_journal_while_it_is_idle(tmp_path: Path) -> None:
    """Under fsync the journal preallocates between rounds, when nothing waits:
    zeros are there before an append needs them, a little before the first
    write, a step whenever less than one is left. Ledger files get none (they
    are never fsynced on the append path)."""
    f = await FileManagedLedgerFactory.create(str(tmp_path))
    try:
        ml = await f.open_impl(NAME)
        path = f.file_journal.current_path
        await eventually_async(
            "the first preallocation", lambda: _file_size(path) == FIRST_PREALLOCATION_STEP
        )
        first = await ml.add_entry(b"first")
        await eventually_async(
            "an idle preallocation", lambda: _file_size(path) >= IDLE_PREALLOCATION_STEP
        )
        big = b"x" * (PREALLOCATION_STEP + IDLE_PREALLOCATION_STEP)
        second = await ml.add_entry(big)  # runs past the zeros: a step after it
        assert _file_size(path) >= len(big) + PREALLOCATION_STEP
        entries = await ml.read_entries(first, 10, 1 << 30)
        assert [e.position for e in entries] == [first, second]
        assert entries[1].data == big
        ledger_file = ml.layout.current.file
        assert _file_size(ledger_file.path) == ledger_file.size == 2 * 12 + 5 + len(big)
    finally:
        await f.close()


async def test_a_clean_close_checkpoints_and_removes_the_journal(tmp_path: Path) -> None:
    """SEM-5.2: a clean close syncs every ledger file and deletes the journal;
    the next open replays nothing and serves every entry."""
    f = await FileManagedLedgerFactory.create(str(tmp_path))
    ml = await f.open_impl(NAME)
    await ml.open_cursor("keep")
    positions = [await ml.add_entry(b"r%d" % i) for i in range(3)]
    journal_dir = Path(f.file_journal.current_path).parent
    assert journal_dir.is_dir()
    await f.close()
    assert not journal_dir.exists()
    f = await FileManagedLedgerFactory.create(str(tmp_path))
    try:
        ml = await f.open_impl(NAME)
        entries = await ml.read_entries(EARLIEST, 100)
        assert [e.position for e in entries] == positions
        assert [e.data for e in entries] == [b"r0", b"r1", b"r2"]
    finally:
        await f.close()


async def test_a_clean_close_of_many_ledgers_syncs_the_filesystem_once(tmp_path: Path) -> None:
    """SEM-5.2: with more ledger files written than SYNCFS_MIN_FILES the
    checkpoint syncs the filesystem in one call (syncfs) instead of file by
    file; the journal is still deleted and every entry served after."""
    assert syncfs_available()  # Linux: the path under test
    count = SYNCFS_MIN_FILES + 16
    f = await FileManagedLedgerFactory.create(str(tmp_path))
    journal_dir = Path(f.file_journal.current_path).parent
    for i in range(count):
        ml = await f.open_impl(f"{NAME}-{i}")
        await ml.open_cursor("keep")
        await ml.add_entry(b"m%d" % i)
    await f.close()
    assert not journal_dir.exists()
    f = await FileManagedLedgerFactory.create(str(tmp_path))
    try:
        for i in range(count):
            ml = await f.open_impl(f"{NAME}-{i}")
            entries = await ml.read_entries(EARLIEST, 10)
            assert [e.data for e in entries] == [b"m%d" % i]
    finally:
        await f.close()


async def test_thousands_of_ledgers_keep_a_few_files_open(tmp_path: Path) -> None:
    """Appends to and reads from 60 ledgers with room for 4 open files: every
    entry is stored and read back from disk, and at most 4 ledger files are
    open between rounds (the journal writes at most 3 per round)."""
    f = await FileManagedLedgerFactory.create(
        str(tmp_path), ManagedLedgerConfig(entry_cache_size=0), max_open_files=4
    )
    try:
        ledgers = [await f.open_impl(f"t/n/persistent/many-{i}") for i in range(60)]
        assert open_files_under(tmp_path / "ledgers") <= 4
        receipts = [
            ml.add_entry(b"%d-%d" % (i, k)) for k in range(3) for i, ml in enumerate(ledgers)
        ]
        positions = await asyncio.gather(*receipts)
        assert open_files_under(tmp_path / "ledgers") <= 4
        for i, ml in enumerate(ledgers):
            entries = await ml.read_entries(EARLIEST, 10)
            assert [e.data for e in entries] == [b"%d-%d" % (i, k) for k in range(3)]
        assert sum(ml.stats.disk_reads for ml in ledgers) > 0
        assert open_files_under(tmp_path / "ledgers") <= 4
        assert len(set(positions)) == len(positions)
    finally:
        await f.close()


async def test_ledger_ids_stay_unique_across_factories_sharing_a_store(tmp_path: Path) -> None:
    """Ids come in reserved blocks: two brokers on one metadata store (cluster
    mode) never hand out the same id, and a restart skips the rest of a block."""
    store = await SqliteMetadataStore.open(str(tmp_path / "meta.db"))
    try:
        data = str(tmp_path / "data")  # cluster mode: one directory, many brokers
        a = await FileManagedLedgerFactory.create(data, store=store, shared=True)
        b = await FileManagedLedgerFactory.create(data, store=store, shared=True)
        ids: list[int] = []
        for i in range(6):
            ml = await (a if i % 2 else b).open_impl(f"t/n/persistent/shared-{i}")
            ids.extend(info.ledger_id for info in ml.layout.infos())
        await a.close()
        a = await FileManagedLedgerFactory.create(data, store=store, shared=True)
        ml = await a.open_impl("t/n/persistent/after-restart")
        ids.append(ml.layout.current.ledger_id)
        assert len(set(ids)) == len(ids) == 7
        # A topic moving between brokers: its ids keep growing although the
        # broker it moves to holds an older block.
        low, high = (a, b) if ids[-1] < ids[-2] else (b, a)
        moved = await high.open_impl("t/n/persistent/moving")
        await moved.add_entry(b"on the broker with the newer block")
        first = moved.layout.current.ledger_id
        await moved.close()
        moved = await low.open_impl("t/n/persistent/moving")
        assert moved.layout.ids[0] == first
        assert moved.layout.current.ledger_id > first
        await moved.close()
        await a.close()
        await b.close()
    finally:
        await store.close()
