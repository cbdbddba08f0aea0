"""The open-file LRU (storage/handles.py) over real ledger files: it closes
the least recently used idle descriptors past its capacity, never one in use;
its capacity comes from the descriptor limit, which the daemon raises."""

from __future__ import annotations

import asyncio
import resource
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from magnetar.broker.__main__ import NR_OPEN_DEFAULT, raise_open_files_limit
from magnetar.broker.storage import FileManagedLedgerFactory, ManagedLedgerConfig
from magnetar.broker.storage.handles import (
    MAX_OPEN_FILES,
    MIN_OPEN_FILES,
    OpenFiles,
    capacity_for_limit,
)
from magnetar.broker.storage.segment import LedgerFile
from tests.unit.storage.test_storage_ledger import _open_ledger_files


def _files(tmp_path: Path, n: int) -> list[LedgerFile]:
    return [LedgerFile.create(str(tmp_path / f"{i}.log"), i, sync_dir=False) for i in range(n)]


def _open(files: list[LedgerFile]) -> list[int]:
    return [i for i, lf in enumerate(files) if lf.fd >= 0]


def test_least_recently_used_idle_files_close_first(tmp_path: Path) -> None:
    files = _files(tmp_path, 6)
    lru = OpenFiles(3)
    try:
        for lf in files[:3]:
            lru.adopt(lf)
        lru.acquire(files[0])  # in use, and now the most recent
        lru.release(files[0])
        lru.adopt(files[3])  # one too many: 1 is the oldest idle one
        assert _open(files[:4]) == [0, 2, 3]
        lru.adopt(files[4])
        lru.adopt(files[5])
        assert _open(files) == [3, 4, 5]
        assert len(lru) == 3
    finally:
        for lf in files:
            lru.close(lf)


def test_files_in_use_stay_open_past_capacity(tmp_path: Path) -> None:
    """A round holds more files than the capacity: none of them closes while
    in use, and the extra ones close when released."""
    files = _files(tmp_path, 5)
    lru = OpenFiles(2)
    try:
        for lf in files:
            lru.acquire(lf)
        assert _open(files) == [0, 1, 2, 3, 4]
        lru.release(files[4])  # the only idle one: it goes, though the newest
        assert _open(files) == [0, 1, 2, 3]
        for lf in files[:4]:
            lru.release(lf)
        assert _open(files) == [2, 3]
        lru.acquire(files[0])  # reopened on demand
        assert files[0].fd >= 0
        assert _open(files) == [0, 3]
        lru.release(files[0])
    finally:
        for lf in files:
            lru.close(lf)


@contextmanager
def _soft_limit(soft: int) -> Iterator[None]:
    """This process's soft descriptor limit lowered for a while (never
    above the hard one, so it can be restored)."""
    old = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, old[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, old)


def test_capacity_is_half_the_descriptor_limit_within_bounds() -> None:
    """Half the soft limit is for ledger files; never under MIN_OPEN_FILES,
    never over MAX_OPEN_FILES."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    with _soft_limit(1000):
        assert capacity_for_limit() == 500
    with _soft_limit(200):
        assert capacity_for_limit() == MIN_OPEN_FILES
    if hard == resource.RLIM_INFINITY or hard >= 2 * MAX_OPEN_FILES + 2:
        with _soft_limit(2 * MAX_OPEN_FILES + 2):
            assert capacity_for_limit() == MAX_OPEN_FILES


def test_the_daemon_raises_its_soft_limit_to_the_hard_one() -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard <= 512:
        pytest.skip(f"hard descriptor limit {hard}: nothing to raise")
    with _soft_limit(256):
        raised = raise_open_files_limit()
        soft_now = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        assert raised == soft_now > 256
        assert soft_now == (NR_OPEN_DEFAULT if hard == resource.RLIM_INFINITY else hard)
        assert raise_open_files_limit() == soft_now  # already there: unchanged


async def test_ledgers_written_in_turn_keep_their_files_open(tmp_path: Path) -> None:
    """With the default capacity (half the descriptor limit) a ledger written
    round after round keeps its descriptor: 200 ledgers, three appends each
    in turn, and every one of their files is still open afterwards (issue 48:
    a reopened file cost an open and a close per message)."""
    if capacity_for_limit() < 200:
        pytest.skip("descriptor limit under 400")
    f = await FileManagedLedgerFactory.create(str(tmp_path), ManagedLedgerConfig())
    try:
        ledgers = [await f.open_impl(f"t/n/persistent/turn-{i}") for i in range(200)]
        for k in range(3):
            await asyncio.gather(*[ml.add_entry(b"%d-%d" % (i, k)) for i, ml in enumerate(ledgers)])
        assert _open_ledger_files(tmp_path) == 200
    finally:
        await f.close()
