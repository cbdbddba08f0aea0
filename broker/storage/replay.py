"""Replay of journals left behind: what the ledger files lost, copied back.

A journal directory whose lock is free belongs to no live process. After a
crash of the process the ledger files already hold everything (the page
cache outlives the process) and replay finds nothing to copy; after a crash
of the operating system they may lack a tail the journal made durable. For
each journaled group of a ledger the metadata store still lists, the records
the ledger file lacks (after a torn tail is cut) are appended; a ledger
trimmed or deleted since is skipped. Then the files are synced and the
journal directory removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from concurrent.futures import Executor
from dataclasses import dataclass

import structlog

from magnetar.broker.storage.api import MetadataStore
from magnetar.broker.storage.journal import JOURNALS_DIR, LOCK_NAME
from magnetar.broker.storage.journal_format import JournalGroup, read_groups
from magnetar.broker.storage.layout import decode_ledger_list
from magnetar.broker.storage.paths import ledger_dir, ledger_meta_path
from magnetar.broker.storage.records import scan
from magnetar.broker.storage.segment import (
    SYNCFS_MIN_FILES,
    LedgerFile,
    fsync_dir,
    sync_filesystem,
    syncfs_available,
)

log = structlog.get_logger(__name__)


@dataclass(slots=True)
class _Orphan:
    directory: str
    lock_fd: int
    groups: list[tuple[JournalGroup, bytes]]


async def replay_journals(data_dir: str, store: MetadataStore, executor: Executor) -> int:
    """Replay every journal no live process holds; the entries copied back."""
    loop = asyncio.get_running_loop()
    orphans: list[_Orphan] = await loop.run_in_executor(executor, _collect, data_dir)
    copied = 0
    for orphan in orphans:
        try:
            # Which ledgers still exist, and the entry count of the closed ones.
            known = await _ledger_lists(store, {g.name for g, _ in orphan.groups})
            copied += await loop.run_in_executor(executor, _apply, data_dir, orphan, known)
        finally:
            os.close(orphan.lock_fd)
    return copied


async def _ledger_lists(store: MetadataStore, names: set[str]) -> dict[str, dict[int, int]]:
    """Each managed ledger's ledgers with their entry counts (-1: open);
    a name the store no longer has is left out. Read a thousand at a time."""
    known: dict[str, dict[int, int]] = {}
    ordered = list(names)
    for i in range(0, len(ordered), 1000):
        chunk = ordered[i : i + 1000]
        got = await asyncio.gather(*(store.get(ledger_meta_path(n)) for n in chunk))
        for name, result in zip(chunk, got, strict=True):
            if result is not None:
                known[name] = {r.ledger_id: r.entries for r in decode_ledger_list(result.value)}
    return known


def _collect(data_dir: str) -> list[_Orphan]:
    root = os.path.join(data_dir, JOURNALS_DIR)
    if not os.path.isdir(root):
        return []
    found: list[_Orphan] = []
    for name in sorted(os.listdir(root)):
        directory = os.path.join(root, name)
        lock_path = os.path.join(directory, LOCK_NAME)
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except (FileNotFoundError, NotADirectoryError):
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)  # a live broker's journal
            continue
        groups: list[tuple[JournalGroup, bytes]] = []
        for file_name in sorted(os.listdir(directory)):
            if not file_name.endswith(".jnl"):
                continue
            with open(os.path.join(directory, file_name), "rb") as f:
                buf = f.read()
            groups.extend((g, buf) for g in read_groups(buf))
        found.append(_Orphan(directory, fd, groups))
    return found


def _apply(data_dir: str, orphan: _Orphan, known: dict[str, dict[int, int]]) -> int:
    """Copy back what the ledger files lack, one ledger file open at a time
    (a journal may hold groups of a hundred thousand ledgers). *Blocking*."""
    by_ledger: dict[tuple[str, int], list[tuple[JournalGroup, bytes]]] = {}
    for group, buf in orphan.groups:
        ledgers = known.get(group.name)
        if ledgers is None or group.ledger_id not in ledgers:
            continue  # deleted or trimmed since
        by_ledger.setdefault((group.name, group.ledger_id), []).append((group, buf))
    copied = 0
    # Many files: one syncfs at the end (one fsync each took 0.3 ms a file).
    one_sync = len(by_ledger) >= SYNCFS_MIN_FILES and syncfs_available()
    synced_dirs: set[str] = set()
    for (name, ledger_id), groups in by_ledger.items():
        lf, count = _open_for_replay(data_dir, name, ledger_id)
        try:
            limit = known[name][ledger_id]
            for group, buf in groups:  # in journal order
                copied_here, count = _copy_group(lf, count, group, buf, limit)
                copied += copied_here
            if not one_sync:
                lf.sync()
        finally:
            lf.close()
        synced_dirs.add(os.path.dirname(lf.path))
    if one_sync:
        sync_filesystem(data_dir)  # a write-back error fails the start
    else:
        for directory in synced_dirs:
            fsync_dir(directory)
        # A ledger directory replay made anew has its name in the parent.
        for parent in {os.path.dirname(d) for d in synced_dirs}:
            fsync_dir(parent)
    if copied:
        log.warning("journal replayed", journal=orphan.directory, entries=copied)
    for name in os.listdir(orphan.directory):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(orphan.directory, name))
    with contextlib.suppress(OSError):
        os.rmdir(orphan.directory)
    return copied


def _open_for_replay(data_dir: str, name: str, ledger_id: int) -> tuple[LedgerFile, int]:
    directory = ledger_dir(data_dir, name)
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"{ledger_id}.log")
    if not os.path.exists(path):
        LedgerFile.create(path, ledger_id, True).close()
    lf, cut, torn = LedgerFile.open_existing(path, ledger_id, True)
    if torn:
        log.warning("cut a torn tail before replay", file=path, bytes=cut)
    return lf, lf.entry_count


def _copy_group(
    lf: LedgerFile, count: int, group: JournalGroup, buf: bytes, limit: int
) -> tuple[int, int]:
    """Append the group's records from entry ``count`` on (never past a closed
    ledger's recorded ``limit``); (entries copied, new count)."""
    last = group.first + group.count
    if limit >= 0:
        last = min(last, limit)
    if count >= last:
        return 0, count
    if group.first > count:
        log.error("journal gap: entries missing before a group", file=lf.path,
                  have=count, group_first=group.first)  # fmt: skip
        return 0, count
    records = memoryview(buf)[group.start : group.end]
    offsets = scan(records, verify=False).offsets
    lo, hi = offsets[count - group.first], offsets[last - group.first]
    lf.append_raw([bytes(records[lo:hi])], hi - lo, False)
    return last - count, last
