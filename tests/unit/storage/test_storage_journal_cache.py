"""The journal's synced pages leave the page cache; what it holds on disk does
not change (SEM-5.1: a receipt means the entry is stored; replay reads the
journal from disk)."""

from __future__ import annotations

import ctypes
import mmap
import os
from pathlib import Path

import pytest

from magnetar.broker.storage import (
    EARLIEST,
    FileManagedLedgerFactory,
    ManagedLedgerConfig,
    SyncPolicy,
)
from magnetar.broker.storage.segment import PREALLOCATION_STEP, UNCACHE_STEP
from tests.support.polling import eventually_async

NAME = "public/default/persistent/t"
_PAGE = mmap.PAGESIZE
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]


def resident_bytes(path: str, length: int) -> int:
    """How much of the first ``length`` bytes of a file is in the page cache
    (mincore(2) over a private mapping, which reads nothing in)."""
    with open(path, "rb") as fh:
        mapped = mmap.mmap(fh.fileno(), length, access=mmap.ACCESS_COPY)
    try:
        pages = (length + _PAGE - 1) // _PAGE
        vec = (ctypes.c_ubyte * pages)()
        anchor = ctypes.c_char.from_buffer(mapped)
        try:
            if _libc.mincore(ctypes.addressof(anchor), length, vec) != 0:
                raise OSError(ctypes.get_errno(), "mincore failed")
        finally:
            del anchor
        return sum(v & 1 for v in vec) * _PAGE
    finally:
        mapped.close()


def _read(path: str) -> bytes:
    return Path(path).read_bytes()


@pytest.mark.parametrize("policy", [SyncPolicy.FSYNC, SyncPolicy.INTERVAL])
async def test_synced_journal_pages_leave_the_page_cache(
    tmp_path: Path, policy: SyncPolicy
) -> None:
    """12 MB appended in 100 KB entries: the journal keeps at most its last
    preallocation step (and one drop step) cached once synced, the ledger
    file keeps its pages (reads use them), and the journal on disk still
    holds every entry, which is what a replay after a crash reads."""
    config = ManagedLedgerConfig(sync_policy=policy, sync_interval_ms=5)
    f = await FileManagedLedgerFactory.create(str(tmp_path), config)
    try:
        ml = await f.open_impl(NAME)
        payloads = [os.urandom(100_000) for _ in range(120)]
        for payload in payloads:
            await ml.add_entry(payload)
        journal = f.file_journal.current_path
        data_end = 12_000_000 - 12_000_000 % _PAGE  # within the entries written
        bound = PREALLOCATION_STEP + UNCACHE_STEP
        await eventually_async(
            "the synced journal pages dropped",
            lambda: resident_bytes(journal, data_end) <= bound,
        )
        ledger_file = ml.layout.current.file.path
        assert resident_bytes(ledger_file, data_end) >= 11_000_000
        on_disk = _read(journal)
        assert all(on_disk.count(p) == 1 for p in payloads)
        entries = await ml.read_entries(EARLIEST, 200, 1 << 30)
        assert [e.data for e in entries] == payloads
    finally:
        await f.close()
