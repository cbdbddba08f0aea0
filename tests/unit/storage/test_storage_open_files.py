"""The open-file LRU (storage/handles.py) over real ledger files: it closes
the least recently used idle descriptors past its capacity, never one in use;
its capacity comes from the descriptor limit, which the daemon raises."""

from __future__ import annotations

import asyncio
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from magnetar.broker.__main__ import MAX_RAISED_NOFILE
from magnetar.broker.storage import FileManagedLedgerFactory, ManagedLedgerConfig
from magnetar.broker.storage.handles import (
    MAX_OPEN_FILES,
    MIN_OPEN_FILES,
    OpenFiles,
    capacity_for_limit,
)
from magnetar.broker.storage.segment import LedgerFile
from tests.support.fds import open_files_under


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


def _run_child(code: str) -> str:
    """``code`` in a Python process of its own (descriptor limits are
    process-wide: the test process keeps its own); its stdout."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_capacity_is_half_the_descriptor_limit_within_bounds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Half the soft limit is for ledger files; never under MIN_OPEN_FILES,
    never over MAX_OPEN_FILES."""
    for soft, expected in (
        (1000, 500),
        (200, MIN_OPEN_FILES),
        (2 * MAX_OPEN_FILES + 2, MAX_OPEN_FILES),
        (resource.RLIM_INFINITY, MAX_OPEN_FILES),
    ):
        monkeypatch.setattr(resource, "getrlimit", lambda _which, s=soft: (s, s))
        assert capacity_for_limit() == expected, soft


def test_the_daemon_raises_its_soft_limit_to_the_hard_one() -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard <= 256:
        pytest.skip(f"hard descriptor limit {hard}: a soft limit of 256 has nowhere to go")
    out = _run_child(
        """
        import resource
        from magnetar.broker.__main__ import raise_open_files_limit
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
        print(*raise_open_files_limit(), *resource.getrlimit(resource.RLIMIT_NOFILE))
        print(*raise_open_files_limit())
        """
    )
    first, again = (list(map(int, line.split())) for line in out.splitlines())
    soft_now = first[2]
    assert first[:2] == first[2:]  # what it returns is what is in force
    assert soft_now == (
        MAX_RAISED_NOFILE if hard == resource.RLIM_INFINITY else min(hard, MAX_RAISED_NOFILE)
    )
    assert again[0] == soft_now  # already there: unchanged


def test_out_of_descriptors_the_lru_shrinks_instead_of_failing(tmp_path: Path) -> None:
    """The descriptor table fills (here a limit 16 above what the process
    holds) while the LRU believes it may keep 1,000 files: instead of EMFILE,
    the idle half closes and the open goes through; every one of 40 files
    is acquired and released in turn."""
    out = _run_child(
        f"""
        import os, resource
        from magnetar.broker.storage.handles import OpenFiles
        from magnetar.broker.storage.segment import LedgerFile
        files = [LedgerFile.create(f"{tmp_path}/{{i}}.log", i, sync_dir=False) for i in range(40)]
        for lf in files:
            lf.release_fd()
        held = len(os.listdir("/proc/self/fd"))
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (held + 16, hard))
        lru = OpenFiles(1000)
        for lf in files:
            lru.acquire(lf)
            lru.release(lf)
        print(lru.capacity, len(lru), sum(lf.fd >= 0 for lf in files))
        """
    )
    assert "out of descriptors" in out  # the shrink says so in the log
    capacity, kept, open_now = map(int, out.splitlines()[-1].split())
    assert capacity < 16
    assert 0 < kept == open_now <= 16


async def test_ledgers_written_in_turn_keep_their_files_open(tmp_path: Path) -> None:
    """With the default capacity (half the descriptor limit) a ledger written
    round after round keeps its descriptor: 200 ledgers, three appends each
    in turn, and every one of their files is still open afterwards (issue 48:
    a reopened file cost an open and a close per message)."""
    if capacity_for_limit() < 200:
        pytest.skip("soft descriptor limit under 400: the LRU holds fewer than 200 files")
    f = await FileManagedLedgerFactory.create(str(tmp_path), ManagedLedgerConfig())
    try:
        ledgers = [await f.open_impl(f"t/n/persistent/turn-{i}") for i in range(200)]
        for k in range(3):
            await asyncio.gather(*[ml.add_entry(b"%d-%d" % (i, k)) for i, ml in enumerate(ledgers)])
        assert open_files_under(tmp_path / "ledgers") == 200
    finally:
        await f.close()


def test_rounds_after_a_shrink_fit_the_smaller_lru(tmp_path: Path) -> None:
    """Once the LRU has shrunk (the descriptor table full), the journal's
    rounds take no more ledgers than it now holds: 60 ledgers appended to at
    once, with room for about 24 more descriptors, all get their receipts."""
    out = _run_child(
        f"""
        import asyncio, os, resource
        from magnetar.broker.storage import FileManagedLedgerFactory, ManagedLedgerConfig

        async def main():
            f = await FileManagedLedgerFactory.create(
                "{tmp_path}", ManagedLedgerConfig(), max_open_files=1000
            )
            try:
                ledgers = [await f.open_impl(f"t/n/persistent/l-{{i}}") for i in range(60)]
                held = len(os.listdir("/proc/self/fd"))
                hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
                resource.setrlimit(resource.RLIMIT_NOFILE, (held + 24, hard))
                for ml in ledgers[:30]:  # one by one: the table fills, the LRU shrinks
                    await ml.add_entry(b"first")
                await asyncio.gather(*[ml.add_entry(b"second") for ml in ledgers])
                print("appended", sum(ml.stats.entries_written for ml in ledgers))
            finally:
                await f.close()

        asyncio.run(main())
        """
    )
    assert "out of descriptors" in out
    assert out.splitlines()[-1] == "appended 90"
