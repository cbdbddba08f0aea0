"""The open-file LRU (storage/handles.py) over real ledger files: it closes
the least recently used idle descriptors past its capacity, never one in use."""

from __future__ import annotations

from pathlib import Path

from magnetar.broker.storage.handles import OpenFiles
from magnetar.broker.storage.segment import LedgerFile


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
