"""New ledgers (births.py): their records stored together after a short
delay or when something needs them, their files made after the record in
the background, or at once by a first append that comes before."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from magnetar.broker.storage import (
    FileManagedLedgerFactory,
    births as births_module,
    metrics,
)
from magnetar.broker.storage.api import StorageError
from magnetar.broker.storage.ledger import ManagedLedgerImpl
from magnetar.broker.storage.metadata_api import Put
from magnetar.broker.storage.paths import ledger_dir, ledger_meta_path
from tests.unit.storage.storage_support import OpenFactory, ring_available, ring_makes_files

_REGISTRY = CollectorRegistry()
metrics.register(_REGISTRY)


def _made(via: str) -> float:
    sample = "magnetar_storage_new_ledger_files_total"
    return _REGISTRY.get_sample_value(sample, {"via": via}) or 0.0


def _dir(f: FileManagedLedgerFactory, name: str) -> Path:
    return Path(ledger_dir(f.data_dir, name))


async def _stored(f: FileManagedLedgerFactory, name: str) -> bool:
    return await f.store.exists(ledger_meta_path(name))


async def _born(ledgers: list[ManagedLedgerImpl]) -> None:
    """Until the background job has made the ledgers' files (1 s at most)."""
    for _ in range(100):
        if not any(ml.record_pending for ml in ledgers):
            return
        await asyncio.sleep(0.01)


def _count_commits(factory: FileManagedLedgerFactory, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    commits: list[int] = []
    commit = factory.store.commit

    async def counting(ops: list[Put]) -> object:
        commits.append(len(ops))
        return await commit(ops)

    monkeypatch.setattr(factory.store, "commit", counting)
    return commits


async def test_records_of_new_ledgers_are_stored_together_after_the_delay(
    factory: FileManagedLedgerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    commits = _count_commits(factory, monkeypatch)
    names = [f"t/ns/persistent/b{i}" for i in range(5)]
    for name in names:
        await factory.open_impl(name)
    assert not any([await _stored(factory, n) for n in names])  # not yet: the delay
    await asyncio.sleep(births_module.FLUSH_DELAY_S * 4)
    assert all([await _stored(factory, n) for n in names])
    assert commits == [5]
    # No append yet: the files follow the record, in one background job.
    await _born([factory._ledgers[n] for n in names])
    assert all(len(list(_dir(factory, n).iterdir())) == 1 for n in names)
    assert not any(factory._ledgers[n].record_pending for n in names)


async def _open_every(
    factory: FileManagedLedgerFactory, prefix: str, count: int, every_s: float
) -> list[str]:
    names = [f"t/ns/persistent/{prefix}{i}" for i in range(count)]
    for name in names:
        await factory.open_impl(name)
        await asyncio.sleep(every_s)
    return names


async def test_records_wait_while_new_ledgers_keep_coming(
    factory: FileManagedLedgerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A burst of new topics: their records (and then files) are stored once
    it is over, not amid it (issue 43: that work took the burst's CPU)."""
    monkeypatch.setattr(births_module, "FLUSH_DELAY_S", 0.2)
    monkeypatch.setattr(births_module, "MAX_WAIT_S", 10.0)
    commits = _count_commits(factory, monkeypatch)
    names = await _open_every(factory, "q", 10, 0.03)  # 0.3 s, gaps of 0.03
    assert commits == []
    assert not any([await _stored(factory, n) for n in names])
    await _born([factory._ledgers[n] for n in names])
    assert commits == [10]
    assert all([await _stored(factory, n) for n in names])


async def test_records_wait_no_longer_than_the_longest_wait(
    factory: FileManagedLedgerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Births that never stop still have their records stored, MAX_WAIT_S
    after the first waited."""
    monkeypatch.setattr(births_module, "FLUSH_DELAY_S", 0.2)
    monkeypatch.setattr(births_module, "MAX_WAIT_S", 0.3)
    commits = _count_commits(factory, monkeypatch)
    names = await _open_every(factory, "w", 20, 0.03)  # 0.6 s, never quiet
    assert commits and commits[0] < 20
    assert await _stored(factory, names[0])


async def test_the_first_append_makes_the_files_and_stores_the_record_at_once(
    factory: FileManagedLedgerFactory,
) -> None:
    ml = await factory.open_impl("t/ns/persistent/first")
    assert ml.record_pending
    # Well inside the delay: the append does not wait for the timer.
    position = await asyncio.wait_for(ml.add_entry(b"x"), births_module.FLUSH_DELAY_S / 2)
    assert not ml.record_pending
    assert await _stored(factory, ml.name)
    assert [p.name for p in _dir(factory, ml.name).iterdir()] == [f"{position[0]}.log"]
    assert [e.data for e in await ml.read_entries(position, 10)] == [b"x"]


async def test_a_cursor_stores_the_record_at_once_and_the_files_follow(
    factory: FileManagedLedgerFactory,
) -> None:
    ml = await factory.open_impl("t/ns/persistent/sub")
    await asyncio.wait_for(ml.open_cursor("s"), births_module.FLUSH_DELAY_S / 2)
    assert await _stored(factory, ml.name)
    await _born([ml])
    assert not ml.record_pending
    assert [p.name for p in _dir(factory, ml.name).iterdir()] == [
        f"{ml.layout.current.ledger_id}.log"
    ]


async def test_a_ledger_closed_before_its_files_reopens_and_takes_appends(
    open_factory: OpenFactory,
) -> None:
    """A close stores the record and makes no file: the reopened ledger's
    record names a ledger whose file was never made (recovery's newest,
    empty ledger), and the cursor opened after it is kept."""
    f = await open_factory()
    ml = await f.open_impl("t/ns/persistent/empty")
    await ml.close()
    assert await _stored(f, ml.name)
    await asyncio.sleep(births_module.FLUSH_DELAY_S)  # no job made them late either
    assert not _dir(f, ml.name).exists()
    reopened = await f.open_impl("t/ns/persistent/empty")
    await reopened.open_cursor("keep")
    await reopened.close()
    await f.close()
    again = await open_factory()
    last = await again.open_impl("t/ns/persistent/empty")
    assert "keep" in last.cursors_by_name
    position = await last.add_entry(b"after")
    assert [e.data for e in await last.read_entries(position, 1)] == [b"after"]


async def test_a_record_that_cannot_be_stored_fences_its_ledger_alone(
    factory: FileManagedLedgerFactory,
) -> None:
    ok = await factory.open_impl("t/ns/persistent/fine")
    bad = await factory.open_impl("t/ns/persistent/taken")
    # Another writer stores a record first: the batch's commit is refused,
    # then each record alone; only that ledger fails.
    await factory.store.put(bad.meta_path, b"{}")
    with pytest.raises(StorageError):
        await bad.add_entry(b"x")
    assert await ok.add_entry(b"y")


async def test_more_new_ledgers_than_one_commit_takes(
    factory: FileManagedLedgerFactory,
) -> None:
    n = births_module.MAX_COMMIT * 2 + 3
    ledgers: list[ManagedLedgerImpl] = [
        await factory.open_impl(f"t/ns/persistent/m{i}") for i in range(n)
    ]
    factory._ctx.births.store_records()
    await asyncio.gather(*(ml.wait_first_record() for ml in ledgers))
    assert all([await _stored(factory, ml.name) for ml in ledgers])


async def test_more_new_ledgers_than_the_ring_holds_are_all_made_through_it(
    open_factory: OpenFactory, tmp_path: Path
) -> None:
    """Chain after chain: the ring holds MAX_COMMIT ledgers' operations."""
    if not await ring_makes_files(tmp_path):
        pytest.skip("io_uring does not make directories and files on this kernel")
    f = await open_factory(io_uring_sync=True)
    ring, thread = _made("ring"), _made("thread")
    n = births_module.MAX_COMMIT * 2 + 3
    ledgers = [await f.open_impl(f"t/ns/persistent/c{i}") for i in range(n)]
    await _born(ledgers)
    assert (_made("ring") - ring, _made("thread") - thread) == (n, 0)
    assert all(len(list(_dir(f, ml.name).iterdir())) == 1 for ml in ledgers)


@pytest.mark.parametrize("use_ring", [True, False])
async def test_new_ledgers_files_are_made_through_the_ring_where_it_works(
    open_factory: OpenFactory, tmp_path: Path, use_ring: bool
) -> None:
    """With the ring, no I/O thread makes them (issue 43: its GIL hand-offs
    slowed topic creation); with the setting off, the thread does."""
    if use_ring and not await ring_makes_files(tmp_path):
        pytest.skip("io_uring does not make directories and files on this kernel")
    f = await open_factory(io_uring_sync=use_ring)
    ring, thread = _made("ring"), _made("thread")
    ledgers = [await f.open_impl(f"t/ns/persistent/r{i}") for i in range(5)]
    await _born(ledgers)
    assert (_made("ring") - ring, _made("thread") - thread) == ((5, 0) if use_ring else (0, 5))
    for ml in ledgers:
        assert [p.name for p in _dir(f, ml.name).iterdir()] == [
            f"{ml.layout.current.ledger_id}.log"
        ]
        position = await ml.add_entry(b"in " + ml.name.encode())
        assert [e.data for e in await ml.read_entries(position, 1)] == [b"in " + ml.name.encode()]


async def test_a_directory_left_by_a_crash_is_emptied_before_the_ledger_writes(
    factory: FileManagedLedgerFactory,
) -> None:
    """A crash between a ledger's directory and its record leaves the
    directory: the ring's mkdir finds it, and the maker on the I/O thread
    removes what is in it and makes the new file."""
    name = "t/ns/persistent/leftover"
    stale = _dir(factory, name)
    stale.mkdir(parents=True)
    (stale / "7.log").write_bytes(b"old bytes")
    thread = _made("thread")
    ml = await factory.open_impl(name)
    await _born([ml])
    assert not ml.record_pending
    assert [p.name for p in stale.iterdir()] == [f"{ml.layout.current.ledger_id}.log"]
    if await ring_available():
        assert _made("thread") - thread == 1  # the ring's attempt fell back
    position = await ml.add_entry(b"new")
    assert [e.data for e in await ml.read_entries(position, 1)] == [b"new"]


async def test_a_held_record_is_stored_only_once_released(
    factory: FileManagedLedgerFactory,
) -> None:
    """A new ledger of a topic loaded ahead (broker/service/prefetch.py):
    held, closed, it leaves nothing; held, released, it is stored as any."""
    dropped = await factory.open_impl("t/ns/persistent/held-dropped")
    kept = await factory.open_impl("t/ns/persistent/held-kept")
    assert dropped.hold_first_record() and kept.hold_first_record()
    assert not dropped.hold_first_record()  # once
    await asyncio.sleep(births_module.FLUSH_DELAY_S * 4)
    assert not await _stored(factory, dropped.name)
    assert not await _stored(factory, kept.name)
    await dropped.close()
    kept.release_first_record()
    await _born([kept])
    assert not await _stored(factory, dropped.name)
    assert not _dir(factory, dropped.name).exists()
    assert await _stored(factory, kept.name)
    assert await kept.add_entry(b"x")
