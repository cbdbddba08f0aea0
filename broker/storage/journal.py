"""The broker's journal: one writer and one fdatasync for every ledger's appends.

Ledgers with appends queued are scheduled here. One task takes a group from
each of them and writes the round on an I/O thread: each group's records to
its ledger's file (no fsync: the page cache serves reads and survives a
crash of the process), then the same buffers, behind a header per group, to
the journal file with one gathering write and, when any ledger of the round
asks for ``fsync``, one fdatasync. Group commit thus spans every topic: a
thousand topics with one message each cost one fdatasync, not a thousand.
Once synced, the journal's pages are dropped from the page cache: nothing
reads them while the broker runs, and the memory they free is what the
next preallocation reuses (``LedgerFile.uncache``).

The ledger files catch up lazily: when the journal file passes its size
limit a new one starts, and a checkpoint fsyncs every ledger file written
during the old one before deleting it; a clean close does the same for all.
After an operating-system crash, ``replay.py`` copies what the journal holds
and the ledger files lost back into them. Each process writes its own
journal directory (``journals/<id>/``, locked while it lives), so brokers
sharing a data directory never write one journal.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import time
import uuid
from concurrent.futures import Executor
from itertools import islice
from typing import TYPE_CHECKING

import structlog

from magnetar.broker.storage import metrics
from magnetar.broker.storage.group import GroupOwner, PendingGroup
from magnetar.broker.storage.handles import OpenFiles
from magnetar.broker.storage.segment import (
    SYNCFS_MIN_FILES,
    LedgerFile,
    WriteFailed,
    fsync_dir,
    sync_filesystem,
)
from magnetar.broker.storage.uring import IoRing

if TYPE_CHECKING:
    from collections.abc import Callable


log = structlog.get_logger(__name__)

JOURNALS_DIR = "journals"
LOCK_NAME = "LOCK"
# A journal file past this size is closed and checkpointed.
MAX_JOURNAL_FILE_BYTES = 64 * 1024 * 1024
# The largest round written on the loop (see _inline): a batched SEND's
# entry (up to 128 KiB from the official client) fits.
INLINE_WRITE_MAX_BYTES = 1024 * 1024
# An inline round slower than this (a stalling disk) sends the rounds of the
# next INLINE_PAUSE_S to the I/O thread, so the loop is not held twice in a row.
INLINE_SLOW_S = 0.05
INLINE_PAUSE_S = 1.0
# A round takes at most this many groups. Larger rounds (1,500 groups over
# 10,000 topics) held the loop while the connection's pending publishes paused
# its reads, and did not raise the rate.
MAX_ROUND_GROUPS = 96


def journal_file_name(seq: int) -> str:
    return f"{seq:08d}.jnl"


class Journal:
    """Open with :meth:`open`; close after every ledger has stopped writing."""

    def __init__(
        self,
        directory: str,
        lock_fd: int,
        first: LedgerFile,
        executor: Executor,
        sync_interval_s: float,
        write_guard: Callable[[], str | None] | None,
        max_file_bytes: int,
        files: OpenFiles,
        ring: IoRing | None = None,
    ) -> None:
        self.directory = directory
        # fdatasync without the I/O thread, where io_uring is available.
        self._ring = ring
        self._lock_fd = lock_fd
        self._file = first
        self._seq = 1
        self._executor = executor
        self._guard = write_guard
        self._max_file_bytes = max_file_bytes
        self._files = files
        self._loop = asyncio.get_running_loop()
        self._ready: dict[GroupOwner, None] = {}
        self._wakeup: asyncio.Future[None] | None = None
        # Ledger files written since the current journal file began.
        self._dirty: set[LedgerFile] = set()
        self._broken = False
        # Set by a round written without its fdatasync (policy `interval`):
        # the sync task sleeps on it, so an idle broker has no timer to wake.
        self._unsynced = asyncio.Event()
        self._inline_after = 0.0  # loop time before which no round is inlined
        self._closing = False
        self._checkpoints: set[asyncio.Task[None]] = set()
        self._task = self._loop.create_task(self._run(), name="journal-writer")
        self._sync_task = self._loop.create_task(
            self._sync_loop(sync_interval_s), name="journal-interval-sync"
        )

    @classmethod
    async def open(
        cls,
        data_dir: str,
        executor: Executor,
        files: OpenFiles,
        *,
        sync_interval_s: float = 0.1,
        write_guard: Callable[[], str | None] | None = None,
        max_file_bytes: int = MAX_JOURNAL_FILE_BYTES,
        use_ring: bool = True,
    ) -> Journal:
        directory = os.path.join(data_dir, JOURNALS_DIR, uuid.uuid4().hex)
        loop = asyncio.get_running_loop()
        lock_fd, first = await loop.run_in_executor(executor, _make_journal_dir, directory)
        return cls(
            directory,
            lock_fd,
            first,
            executor,
            sync_interval_s,
            write_guard,
            max_file_bytes,
            files,
            await _probed_ring(loop, first) if use_ring else None,
        )

    # --------------------------------------------------------------- interface

    @property
    def files(self) -> OpenFiles:
        """The open-file limit the journal's rounds respect."""
        return self._files

    @property
    def current_path(self) -> str:
        """The journal file being written."""
        return self._file.path

    def schedule(self, writer: GroupOwner) -> None:
        """``writer`` has appends queued: take them in the next round."""
        self._ready[writer] = None
        wakeup = self._wakeup
        if wakeup is not None:
            self._wakeup = None
            wakeup.set_result(None)

    def forget(self, lf: LedgerFile) -> None:
        """A ledger file deleted (trimmed): no checkpoint syncs it."""
        self._dirty.discard(lf)

    async def close(self) -> None:
        """Write what is scheduled, checkpoint everything, delete the journal."""
        if self._closing:
            return
        self._closing = True
        if self._wakeup is not None:
            self._wakeup.set_result(None)
            self._wakeup = None
        await asyncio.wait([self._task])
        if self._ring is not None:
            self._ring.close()
        self._sync_task.cancel()
        await asyncio.wait([self._sync_task])
        if self._checkpoints:
            await asyncio.wait(list(self._checkpoints))
        dirty, self._dirty = self._dirty, set()
        old = self._file
        clean = await self._run_blocking(_checkpoint, old, dirty, True)
        if clean:
            await self._run_blocking(_remove_dir, self.directory)
        else:
            log.error("journal kept: a ledger file could not be synced", journal=self.directory)
        os.close(self._lock_fd)

    # -------------------------------------------------------------------- internals

    def _run_blocking(self, fn: Callable[..., object], *args: object) -> asyncio.Future[object]:
        return self._loop.run_in_executor(self._executor, fn, *args)

    async def _run(self) -> None:
        while True:
            if not self._ready:
                if self._closing:
                    return
                if not self._broken and self._file.needs_preallocation():
                    await self._run_blocking(self._file.preallocate_ahead)
                    continue
                wakeup: asyncio.Future[None] = self._loop.create_future()
                self._wakeup = wakeup
                await wakeup
                continue
            ready = self._ready
            # A round writes at most this many ledger files: each needs its
            # descriptor open during the round, and the open-file limit
            # shrinks when the descriptor table fills (handles.py).
            capacity = self._files.capacity
            max_round = min(MAX_ROUND_GROUPS, max(1, capacity - capacity // 4))
            if len(ready) <= max_round:
                writers = list(ready)
                ready.clear()
            else:
                writers = list(islice(ready, max_round))
                for w in writers:
                    del ready[w]
            groups = [g for g in map(_take, writers) if g is not None]
            if not groups:
                continue
            files = self._files
            acquired: list[LedgerFile] = []
            try:
                for g in groups:
                    files.acquire(g.file)
                    acquired.append(g.file)
                await self._write_round(groups)
            except Exception as exc:  # never leave receipts pending
                for g in groups:
                    if g.error is None:
                        g.error = WriteFailed(f"journal round failed: {exc}", False)
                # The log must not end the writer: out of descriptors, say,
                # a renderer that imports on first use fails too.
                with contextlib.suppress(Exception):
                    log.exception("journal round failed")
            finally:
                for lf in acquired:
                    files.release(lf)
            refused = self._guard() if self._guard is not None else None
            for g in groups:
                if g.error is None:
                    self._dirty.add(g.file)
                g.writer.finish(g, refused)

    async def _write_round(self, groups: list[PendingGroup]) -> None:
        if self._broken or self._file.write_end >= self._max_file_bytes:
            await self._roll()
        sync = False
        for g in groups:
            if g.sync:
                sync = True
                break
        # The clock itself: uvloop's loop.time() stands still within a callback.
        started = time.monotonic()
        if started >= self._inline_after and _inline(groups, sync):
            intact = _write_round(self._file, groups, sync)
            metrics.INLINE_ROUNDS.inc()
            took = time.monotonic() - started
            if took > INLINE_SLOW_S:
                self._inline_after = started + took + INLINE_PAUSE_S
        elif sync and started >= self._inline_after and self._ring_fits(groups):
            intact = await self._ring_round(groups, started)
            took = time.monotonic() - started
        else:
            intact = bool(await self._run_blocking(_write_round, self._file, groups, sync))
            took = time.monotonic() - started
        metrics.WRITE_SECONDS.observe(took)
        if not intact:
            self._broken = True  # the next round starts a new journal file
        if not sync and any(g.journaled and g.error is None for g in groups):
            self._unsynced.set()

    def _ring_fits(self, groups: list[PendingGroup]) -> bool:
        """A round for the ring: small enough to write on the loop, into
        journal blocks already allocated (the preallocation's zeros are a
        large write, left to the thread)."""
        if self._ring is None:
            return False
        nbytes = 0
        for g in groups:
            nbytes += g.record_bytes + len(g.header)
        if nbytes > INLINE_WRITE_MAX_BYTES:
            return False
        journal = self._file
        return journal.allocated_for(journal.write_end + nbytes)

    async def _ring_round(self, groups: list[PendingGroup], started: float) -> bool:
        """Write the round on the loop (page-cache copies), then fdatasync the
        journal through the ring while the loop reads the next sends."""
        ring = self._ring
        assert ring is not None
        journal = self._file
        intact = _write_round(journal, groups, False)  # the ring syncs, below
        took = time.monotonic() - started
        if took > INLINE_SLOW_S:
            self._inline_after = started + took + INLINE_PAUSE_S
        journaled = [g for g in groups if g.error is None and g.journaled]
        if not journaled:
            return intact
        metrics.RING_ROUNDS.inc()
        try:
            try:
                waiter = ring.fdatasync(journal.fd)
            except OSError:  # not submitted (ring full or refused): the thread syncs
                await self._run_blocking(journal.sync)
            else:
                await waiter
        except OSError as exc:
            # As after a failed fdatasync on the thread: the journal file is
            # not trusted any more, the round's groups fail, the next round
            # starts a new journal file.
            _fail_journaled(journaled, WriteFailed(f"fsync failed: {exc}", False))
            return False
        journal.uncache(journal.write_end)
        return intact

    async def _roll(self) -> None:
        """Start the next journal file; checkpoint the old one in the background."""
        seq = self._seq + 1
        path = os.path.join(self.directory, journal_file_name(seq))
        new = await self._loop.run_in_executor(self._executor, LedgerFile.create, path, seq)
        old, dirty = self._file, self._dirty
        self._file, self._dirty, self._seq = new, set(), seq
        self._broken = False
        task = self._loop.create_task(self._checkpoint(old, dirty), name="journal-checkpoint")
        self._checkpoints.add(task)
        task.add_done_callback(self._checkpoints.discard)

    async def _checkpoint(self, old: LedgerFile, dirty: set[LedgerFile]) -> None:
        try:
            clean = await self._run_blocking(_checkpoint, old, dirty, False)
        except Exception:
            log.exception("journal checkpoint failed", journal=old.path)
            return
        if not clean:
            log.error("journal file kept: a ledger file could not be synced", journal=old.path)

    async def _sync_loop(self, interval_s: float) -> None:
        """``interval``: the journal is synced at most this long after a write.
        It waits for one first: ticking every interval while idle cost an
        idle broker a wake-up each (about 200 us of CPU on a virtual machine)."""
        unsynced = self._unsynced
        while True:
            await unsynced.wait()
            await asyncio.sleep(interval_s)
            unsynced.clear()  # a write from here on waits for the next sync
            file = self._file
            try:
                await self._run_blocking(_sync_and_uncache, file, file.write_end)
            except OSError:
                log.exception("journal fsync failed", journal=self._file.path)


async def _probed_ring(loop: asyncio.AbstractEventLoop, first: LedgerFile) -> IoRing | None:
    """A ring whose fdatasync works: one sync of the new journal file first,
    for kernels and sandboxes that set up a ring but refuse its operations."""
    ring = IoRing.open(loop)
    if ring is None:
        return None
    try:
        await ring.fdatasync(first.fd)
    except OSError as exc:
        ring.close()
        log.info("io_uring fdatasync refused: fdatasync runs on the I/O thread", error=str(exc))
        return None
    return ring


def _inline(groups: list[PendingGroup], sync: bool) -> bool:
    """Whether a round is written on the loop rather than the I/O thread.

    A hop to the I/O thread and back wakes two threads, which on a virtual
    machine costs more CPU than the write (issue 48: a lone send's broker CPU
    fell from 225 to 85 us under `none`, 245 to 115 under `fsync`; a batched
    SEND's from 1.03 to 0.80-0.87 us a message under `fsync`). So a round is
    written inline when nothing waits on the disk (`none`), and under
    `fsync` when it is a single entry: a lone send or a lone batch, whose
    client waits for that fdatasync anyway. A round of many entries keeps the
    thread: the loop reads the next sends while the disk syncs, so the next
    round gathers more. An inline round that stalls (INLINE_SLOW_S) pauses
    inlining for a while, so a slow disk holds the loop once, not per send."""
    if sync and (len(groups) > 1 or len(groups[0].ends) > 1):
        return False
    return sum(g.record_bytes for g in groups) <= INLINE_WRITE_MAX_BYTES


def _sync_and_uncache(journal: LedgerFile, end: int) -> None:
    """fdatasync, then drop what it made durable from the cache. *Blocking*."""
    journal.sync()
    journal.uncache(end)


def _take(writer: GroupOwner) -> PendingGroup | None:
    return writer.take()


def _write_round(journal: LedgerFile, groups: list[PendingGroup], sync: bool) -> bool:
    """Each group to its ledger file, then the journaled ones to the journal
    and (``sync``) one fdatasync. *Blocking*. A group whose ledger write fails
    fails alone; a failed journal write fails every group journaled with it,
    their ledger files cut back to where they were. Returns False when the
    journal file itself could not be cut back after a failed write."""
    for g in groups:
        try:
            g.file.write_records(g.parts, g.ends, False)
        except WriteFailed as exc:
            g.error = exc
    parts: list[bytes] = []
    nbytes = 0
    journaled = [g for g in groups if g.error is None and g.journaled]
    for g in journaled:
        parts.append(g.header)
        parts.extend(g.parts)
        nbytes += len(g.header) + g.record_bytes
    if not journaled:
        return True
    try:
        end = journal.append_raw(parts, nbytes, sync)
    except WriteFailed as exc:
        _fail_journaled(journaled, exc)
        return exc.recovered
    if sync:
        journal.uncache(end)
    return True


def _fail_journaled(journaled: list[PendingGroup], exc: WriteFailed) -> None:
    """The journal write (or its sync) failed: each group's ledger file is cut
    back to where the group began, and the group fails."""
    for g in journaled:
        try:
            g.file.cut_back(g.start)
        except OSError as cut:
            why = f"journal write failed ({exc}), cut-back failed: {cut}"
            g.error = WriteFailed(why, False)
            continue
        g.error = WriteFailed(f"journal write failed: {exc}", True)


def _checkpoint(journal: LedgerFile, dirty: set[LedgerFile], last: bool) -> bool:
    """Sync every ledger file written during ``journal`` and their directories,
    then delete the journal file. *Blocking*. False (journal kept) when a
    file could not be synced."""
    clean = True
    if len(dirty) < SYNCFS_MIN_FILES or not _sync_all(journal.path):
        clean = _sync_each(dirty)
    if last:
        with contextlib.suppress(OSError):
            journal.sync()
    journal.close()
    if clean:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(journal.path)
    return clean


def _sync_all(path: str) -> bool:
    """One syncfs for many files; False: sync them one by one instead."""
    try:
        return sync_filesystem(path)
    except OSError:
        # File by file tells which one failed (and keeps the journal then).
        log.exception("syncfs failed; syncing ledger files one by one", path=path)
        return False


def _sync_each(dirty: set[LedgerFile]) -> bool:
    clean = True
    dirs: set[str] = set()
    for lf in dirty:
        try:
            lf.sync_by_path()
        except OSError:
            log.exception("ledger file fsync failed", file=lf.path)
            clean = False
        dirs.add(os.path.dirname(lf.path))
    for d in dirs:
        with contextlib.suppress(FileNotFoundError):
            fsync_dir(d)
            # A new ledger directory's own name lives in its parent.
            fsync_dir(os.path.dirname(d))
    return clean


def _make_journal_dir(directory: str) -> tuple[int, LedgerFile]:
    os.makedirs(directory)
    fsync_dir(os.path.dirname(directory))
    lock_fd = os.open(
        os.path.join(directory, LOCK_NAME), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644
    )
    fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    first = LedgerFile.create(os.path.join(directory, journal_file_name(1)), 1)
    return lock_fd, first


def _remove_dir(directory: str) -> None:
    for name in os.listdir(directory):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(directory, name))
    with contextlib.suppress(OSError):
        os.rmdir(directory)
    with contextlib.suppress(OSError):
        fsync_dir(os.path.dirname(directory))
