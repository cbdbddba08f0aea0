"""New managed ledgers: their first records stored in batches, their files
made after their record, in the background.

A new topic's ledger used to get its directory, first file and metadata
record at once, in the background: per topic a metadata commit (an
fdatasync) and an I/O job making two inodes. Profiled while creating 1,000
topics one by one (issue 43), that background work cost the event loop more
than its own work: the kernel's inode allocation took about 40% of the
broker's CPU on this machine's ext4, and the threads' wake-ups and GIL
hand-offs (133 futex calls per topic) slowed the loop, whose CPU per topic
fell from 1,140 to 830 us without them.

So the records of new ledgers wait until none has come for FLUSH_DELAY_S
(a burst of new topics is over; MAX_WAIT_S at most) and go to the metadata
store in commits of MAX_COMMIT, and once stored the open ledgers get their
directories and first files in one I/O job; an append that
comes first has them made at once (the ledgers whose appends wait in one
loop turn share one I/O job). Making the files only when a first append
needed them (issue 43's first version) left the inodes of a thousand new
topics to their first sends: producing over 10,000 new topics cost the
broker 62 us of CPU a message against 40 with the files made beforehand,
while creating 1,000 topics ran at 1.02-1.21 of pulsar-lite's rate against
1.16-1.20 (within the runs' spread).

Where io_uring is there (uring.py) the directories and files are made by
a chain of mkdirat and openat run by one kernel worker: on the I/O
thread, the worker took the GIL back after each of its syscalls from a loop
busy creating topics, and creating 1,000 topics ran at 870-1,170 a second
against 1,360-1,500 with no file made; through the ring, 1,320-1,480. A
ledger the ring could not serve (no room, a directory left by a crash, a
kernel without the operations) has its maker run on the I/O thread.

Recovery accepts a record
naming a ledger whose file was never made (a ledger closed, or a crash,
before the job ran): it is the newest, and empty.

Waiting is safe because nothing that must survive a crash depends on what
is pending: a ledger's appends are not written (so never acknowledged) until
its record is stored and its file made, its cursors are not opened until
its record is stored, and whatever needs either (an append, a cursor, a
close) has them made at once instead of waiting for the timer. A crash
inside the window loses only an empty topic with no subscription, which the
next producer or consumer creates again (topics are created on first use).
Before, the same was true for the few milliseconds the background write took.
"""

from __future__ import annotations

import asyncio
import errno
import os
from collections.abc import Callable, Coroutine
from concurrent.futures import Executor
from typing import Any, Protocol

import structlog

from magnetar.broker.storage import metrics
from magnetar.broker.storage.api import MetadataStore
from magnetar.broker.storage.metadata_api import Put
from magnetar.broker.storage.uring import IoRing

log = structlog.get_logger(__name__)

# New ledgers' records wait until none was born for this long (a burst of
# new topics is over), or until the first of them waited MAX_WAIT_S.
FLUSH_DELAY_S = 0.05
MAX_WAIT_S = 1.0
# Records per commit (etcd refuses transactions of more than 128 operations).
MAX_COMMIT = 64
# The file ring's size: a commit's ledgers, two operations each.
RING_ENTRIES = 2 * MAX_COMMIT
# What a kernel or sandbox that does not allow an operation answers.
_REFUSED = (errno.EINVAL, errno.EOPNOTSUPP, errno.ENOSYS, errno.EPERM)


class NewLedger(Protocol):
    """The managed ledger as its birth sees it (ManagedLedgerImpl)."""

    meta_path: str
    meta_version: int

    @property
    def is_closed(self) -> bool: ...

    def ledger_list(self) -> bytes: ...
    async def write_ledger_list(self) -> None: ...
    def birth_done(self, error: BaseException | None) -> None: ...


class Birth:
    """What one new ledger still lacks: its stored record, its files."""

    __slots__ = ("error", "files", "make_files", "paths", "record")

    def __init__(
        self,
        make_files: Callable[[], None],
        paths: tuple[str, str],
        record: asyncio.Future[None],
    ) -> None:
        # The blocking maker, until the files are asked for.
        self.make_files: Callable[[], None] | None = make_files
        # (directory, file) the ring makes instead where it can.
        self.paths = paths
        # Resolved (never with an error: see `error`) once stored or failed.
        self.record = record
        # Set when the files are asked for; resolved once made or failed.
        self.files: asyncio.Future[None] | None = None
        self.error: BaseException | None = None

    def pending(self) -> list[asyncio.Future[None]]:
        """What is under way or queued (the files only once asked for)."""
        return [f for f in (self.record, self.files) if f is not None and not f.done()]

    def progress(self, ml: NewLedger) -> None:
        """A part is done: tell the ledger once it failed or has everything."""
        complete = self.record.done() and self.files is not None and self.files.done()
        if self.error is not None or complete:
            ml.birth_done(self.error)


class Births:
    """The new ledgers of one factory whose records or files are not made."""

    def __init__(self, executor: Executor, store: MetadataStore, use_ring: bool = False) -> None:
        self._executor = executor
        self._metadata = store
        self._use_ring = use_ring
        self._ring: IoRing | None = None
        self._records: dict[NewLedger, Birth] = {}  # records not handed to the store
        self._files: dict[NewLedger, Birth] = {}  # files asked for in this loop turn
        self._held: dict[NewLedger, Birth] = {}  # records kept back (hold)
        self._timer: asyncio.TimerHandle | None = None
        self._first_pending = 0.0  # when the oldest of `_records` came
        self._last_birth = 0.0
        self._files_soon = False
        self._tasks: set[asyncio.Task[None]] = set()

    def add(self, ml: NewLedger, make_files: Callable[[], None], paths: tuple[str, str]) -> Birth:
        """``ml`` is new: its record is stored soon, its files made when
        asked for: ``paths`` (its new directory and empty file) through the
        ring, else ``make_files`` (blocking) on the I/O thread."""
        loop = asyncio.get_running_loop()
        birth = Birth(make_files, paths, loop.create_future())
        self._queue(ml, birth)
        return birth

    def hold(self, ml: NewLedger) -> bool:
        """Keep ``ml``'s record back, if it is still waiting for its commit:
        a topic loaded ahead of its first client (broker/service/prefetch.py)
        leaves nothing stored unless one comes. Whatever needs the record
        (hurry: an append, a cursor) releases it; closed first, it is
        dropped (drop_held)."""
        birth = self._records.pop(ml, None)
        if birth is not None:
            self._held[ml] = birth
        return birth is not None

    def release(self, ml: NewLedger) -> None:
        """The held record goes to the next commit after all."""
        birth = self._held.pop(ml, None)
        if birth is not None:
            self._queue(ml, birth)

    def drop_held(self, ml: NewLedger) -> bool:
        return self._held.pop(ml, None) is not None

    def _queue(self, ml: NewLedger, birth: Birth) -> None:
        loop = asyncio.get_running_loop()
        self._records[ml] = birth
        self._last_birth = now = loop.time()
        if self._timer is None:
            self._first_pending = now
            self._timer = loop.call_at(now + FLUSH_DELAY_S, self._store_when_quiet)

    def _store_when_quiet(self) -> None:
        """Store the records once new ledgers stop coming. Stored (and their
        files made) amid a burst of new topics, they took the CPU that the
        burst's own requests needed: on two cores, creating 100 topics one
        by one ran at 1,590-1,700 a second with the records stored 50 ms
        after the first, 1,810-1,850 with them stored after the burst."""
        loop = asyncio.get_running_loop()
        due = min(self._last_birth + FLUSH_DELAY_S, self._first_pending + MAX_WAIT_S)
        if loop.time() < due:
            self._timer = loop.call_at(due, self._store_when_quiet)
            return
        self._timer = None
        self.store_records()

    def hurry(self, ml: NewLedger, birth: Birth, files: bool) -> None:
        """Something waits for ``ml``'s record (and, with ``files``, for its
        files: an append): store and make them now."""
        self.release(ml)
        if ml in self._records:
            self.store_records()
        if files and birth.make_files is not None:
            loop = asyncio.get_running_loop()
            birth.files = loop.create_future()
            self._files[ml] = birth
            if not self._files_soon:
                self._files_soon = True
                loop.call_soon(self._make_files)

    def store_records(self) -> None:
        """Every pending record to the store now."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        batch, self._records = self._records, {}
        items = list(batch.items())
        for i in range(0, len(items), MAX_COMMIT):
            self._spawn(self._store(items[i : i + MAX_COMMIT]))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro, name="ml-births")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _store(self, batch: list[tuple[NewLedger, Birth]]) -> None:
        # One commit for the batch. Its ledgers' lists are written here
        # without their locks: nothing else writes a list before the first
        # is stored (a rollover follows appends, a trim needs two ledgers, a
        # delete closes the ledger first, and all of them wait for it).
        ops = [Put(ml.meta_path, ml.ledger_list(), ml.meta_version) for ml, _ in batch]
        errors: list[BaseException | None]
        try:
            stats = await self._metadata.commit(ops)
        except Exception:
            # One by one, so that one refusal (a record there already) fails
            # that ledger alone.
            results = await asyncio.gather(
                *(ml.write_ledger_list() for ml, _ in batch), return_exceptions=True
            )
            errors = [r if isinstance(r, BaseException) else None for r in results]
        else:
            for (ml, _), stat in zip(batch, stats, strict=True):
                assert stat is not None
                ml.meta_version = stat.version
            errors = [None] * len(batch)
        for (ml, birth), error in zip(batch, errors, strict=True):
            if error is not None and birth.error is None:
                birth.error = error
            birth.record.set_result(None)
            birth.progress(ml)
            # Its files next, unless it closes first (a close waits only for
            # what was asked before it, and never asks for files).
            if birth.error is None and birth.make_files is not None and not ml.is_closed:
                self.hurry(ml, birth, files=True)

    def _make_files(self) -> None:
        self._files_soon = False
        batch, self._files = self._files, {}
        makers: list[Callable[[], None]] = []
        for birth in batch.values():
            assert birth.make_files is not None
            makers.append(birth.make_files)
            birth.make_files = None
        if batch:
            self._spawn(self._make(batch, makers))

    async def _make(self, batch: dict[NewLedger, Birth], makers: list[Callable[[], None]]) -> None:
        made = await self._made_by_ring([birth.paths for birth in batch.values()])
        rest = [i for i, done in enumerate(made) if not done]
        errors: list[BaseException | None] = [None] * len(makers)
        if rest:
            loop = asyncio.get_running_loop()
            try:
                got = await loop.run_in_executor(
                    self._executor, _make_all, [makers[i] for i in rest]
                )
            except Exception as exc:
                got = [exc] * len(rest)
            for i, error in zip(rest, got, strict=True):
                errors[i] = error
        made_by_ring = len(makers) - len(rest)
        if made_by_ring:
            metrics.NEW_LEDGER_FILES.labels("ring").inc(made_by_ring)
        if rest:
            metrics.NEW_LEDGER_FILES.labels("thread").inc(len(rest))
        for (ml, birth), error in zip(batch.items(), errors, strict=True):
            if error is not None and birth.error is None:
                birth.error = error
            assert birth.files is not None
            birth.files.set_result(None)
            birth.progress(ml)

    async def _made_by_ring(self, paths: list[tuple[str, str]]) -> list[bool]:
        """Which of these were made through the ring (chain after chain,
        while it has room); the others are left to their makers, which also
        say what any failure here was."""
        made: list[bool] = []
        while len(made) < len(paths) and (ring := self._file_ring()) is not None:
            chain = paths[len(made) : len(made) + ring.room // 2]
            done = await self._chain(ring, chain) if chain else []
            if not done:
                break
            made += done
        return made + [False] * (len(paths) - len(made))

    async def _chain(self, ring: IoRing, paths: list[tuple[str, str]]) -> list[bool]:
        """One chain through the ring: which were made ([] when the ring
        took none)."""
        made = [False] * len(paths)
        try:
            waits = ring.make_dirs_and_files(paths)
        except OSError:
            return []
        for i, (mkdir, create) in enumerate(waits):
            errors: list[OSError] = []
            try:
                await mkdir
            except OSError as exc:
                errors.append(exc)
            try:
                os.close(await create)
            except OSError as exc:
                errors.append(exc)
            # A directory left by a crash, or any other failure: the maker.
            made[i] = not errors
            for error in errors:
                if error.errno in _REFUSED:
                    self._give_up_ring(error)
        return made

    def _file_ring(self) -> IoRing | None:
        if self._use_ring and self._ring is None:
            self._ring = IoRing.open(asyncio.get_running_loop(), RING_ENTRIES)
            self._use_ring = self._ring is not None
        return self._ring if self._use_ring else None

    def _give_up_ring(self, exc: OSError) -> None:
        """An operation the kernel refused (one without mkdirat, a sandbox):
        the I/O thread makes every new ledger's files from now on."""
        if self._use_ring:
            self._use_ring = False
            log.info("io_uring refused a ledger's files: the I/O thread makes them", error=str(exc))

    async def close(self) -> None:
        """Idempotent: waits for the records and files under way, then
        closes the ring."""
        while self._records or self._files_soon or self._tasks:
            if self._records:
                self.store_records()
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)
            else:
                await asyncio.sleep(0)  # a file job about to start
        self._use_ring = False
        if self._ring is not None:
            self._ring.close()
            self._ring = None


def _make_all(makers: list[Callable[[], None]]) -> list[BaseException | None]:
    """Run each maker (one I/O job for the batch); each one's error or None."""
    errors: list[BaseException | None] = []
    for make in makers:
        try:
            make()
        except OSError as exc:
            errors.append(exc)
        else:
            errors.append(None)
    return errors


def make_dir_once(path: str) -> bool:
    """Create a ledger's directory; True when it was made here (so nothing of
    an earlier creation can be in it). *Blocking*."""
    try:
        os.mkdir(path)
    except FileExistsError:
        return False
    except FileNotFoundError:
        os.makedirs(path, exist_ok=True)
    return True
