"""Issue 50: a journal round of many entries under ``fsync`` is written on
the loop and fdatasynced through io_uring (storage/uring.py) instead of the
I/O thread, where the kernel allows it. Every receipt still means the entry
is on disk (SEM-5.1): the entries are read back after a restart, and a
failed fdatasync fails the round's appends, never confirms them, with the
ledger going on in a new journal file. The same ring makes new ledgers'
directories and first files (births.py, issue 43)."""

from __future__ import annotations

import asyncio
import errno
import os
import tempfile
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from magnetar.broker.storage import (
    EARLIEST,
    FileManagedLedgerFactory,
    ManagedLedgerConfig,
    StorageError,
    SyncPolicy,
    metrics,
)
from magnetar.broker.storage.uring import IoRing
from tests.unit.storage.storage_support import ring_available, ring_makes_files

NAME = "public/default/persistent/ring"

_REGISTRY = CollectorRegistry()
metrics.register(_REGISTRY)


def _ring_rounds() -> float:
    return _REGISTRY.get_sample_value("magnetar_storage_ring_rounds_total") or 0.0


async def _reopened(tmp_path: Path) -> list[bytes]:
    f = await FileManagedLedgerFactory.create(str(tmp_path), ManagedLedgerConfig())
    try:
        ml = await f.open_impl(NAME)
        return [e.data for e in await ml.read_entries(EARLIEST, 1000, 1 << 30)]
    finally:
        await f.close()


def _fd_of(path: str) -> int:
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}") == path:
                return int(name)
        except OSError:
            continue
    raise AssertionError(f"{path} is not open")


async def test_the_ring_syncs_a_descriptor_and_reports_its_errors() -> None:
    ring = IoRing.open(asyncio.get_running_loop())
    if ring is None:
        pytest.skip("io_uring is not available on this kernel")
    with tempfile.TemporaryFile() as tmp:
        tmp.write(b"x" * 100)
        tmp.flush()
        await ring.fdatasync(tmp.fileno())
    with pytest.raises(OSError) as bad:
        await ring.fdatasync(_unused_fd())
    assert bad.value.errno == errno.EBADF
    ring.close()
    ring.close()  # idempotent
    with pytest.raises(OSError, match="closed"):
        ring.fdatasync(0)


async def test_the_ring_makes_directories_and_files_in_one_chain(tmp_path: Path) -> None:
    if not await ring_makes_files(tmp_path):
        pytest.skip("io_uring does not make directories and files on this kernel")
    ring = IoRing.open(asyncio.get_running_loop())
    assert ring is not None
    try:
        (tmp_path / "b").mkdir()  # left by a crash: its mkdir fails, the chain goes on
        paths = [(str(tmp_path / d), str(tmp_path / d / "1.log")) for d in ("a", "b", "c")]
        results = []
        for mkdir, create in ring.make_dirs_and_files(paths):
            outcome: list[object] = []
            for step in (mkdir, create):
                try:
                    outcome.append(await step)
                except OSError as exc:
                    outcome.append(exc.errno)
            results.append(outcome)
        assert results[0][0] == 0 and results[2][0] == 0
        assert results[1][0] == errno.EEXIST
        for _mkdir, fd in results:
            assert isinstance(fd, int) and fd >= 0  # the create ran all the same
            os.close(fd)
        assert [sorted(p.name for p in (tmp_path / d).iterdir()) for d in "abc"] == [["1.log"]] * 3
        # More than the ring holds: refused whole, nothing made.
        many = [(str(tmp_path / f"m{i}"), str(tmp_path / f"m{i}" / "1.log")) for i in range(9)]
        with pytest.raises(OSError) as full:
            ring.make_dirs_and_files(many)
        assert full.value.errno == errno.EAGAIN
        assert not (tmp_path / "m0").exists()
    finally:
        ring.close()


def _unused_fd() -> int:
    fd = os.open(os.devnull, os.O_RDONLY)
    os.close(fd)
    return fd


async def _factory(tmp_path: Path, use_ring: bool) -> FileManagedLedgerFactory:
    if use_ring and not await ring_available():
        pytest.skip("io_uring is not available on this kernel")
    config = ManagedLedgerConfig(sync_policy=SyncPolicy.FSYNC, io_uring_sync=use_ring)
    return await FileManagedLedgerFactory.create(str(tmp_path), config)


@pytest.mark.parametrize("use_ring", [True, False])
async def test_a_round_of_many_entries_is_synced_through_the_ring(
    tmp_path: Path, use_ring: bool
) -> None:
    f = await _factory(tmp_path, use_ring)
    try:
        ml = await f.open_impl(NAME)
        await ml.add_entry(b"first")
        before = _ring_rounds()
        for r in range(5):
            # Appended in one loop turn: they share a round.
            await asyncio.gather(*(ml.add_entry(b"r%d-%d" % (r, i)) for i in range(50)))
        rounds = _ring_rounds() - before
        assert rounds >= 5 if use_ring else rounds == 0
    finally:
        await f.close()
    expected = [b"first"] + [b"r%d-%d" % (r, i) for r in range(5) for i in range(50)]
    assert await _reopened(tmp_path) == expected


@pytest.mark.parametrize("use_ring", [True, False])
async def test_a_failed_fdatasync_fails_the_round_and_the_next_one_goes_on(
    tmp_path: Path, use_ring: bool
) -> None:
    f = await _factory(tmp_path, use_ring)
    try:
        ml = await f.open_impl(NAME)
        await asyncio.gather(*(ml.add_entry(b"kept-%d" % i) for i in range(10)))
        first_journal = f.file_journal.current_path
        # The journal's descriptor now names /dev/null: its writes succeed and
        # its fdatasync fails (EINVAL), as a failing disk's would.
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, _fd_of(first_journal))
        os.close(null)
        before = _ring_rounds()
        results = await asyncio.gather(
            *(ml.add_entry(b"lost-%d" % i) for i in range(10)), return_exceptions=True
        )
        assert all(isinstance(r, StorageError) for r in results), results
        assert (_ring_rounds() > before) == use_ring
        await asyncio.gather(*(ml.add_entry(b"after-%d" % i) for i in range(10)))
        assert f.file_journal.current_path != first_journal
    finally:
        await f.close()
    expected = [b"kept-%d" % i for i in range(10)] + [b"after-%d" % i for i in range(10)]
    assert await _reopened(tmp_path) == expected
