"""ManagedLedgerImpl: the managed ledger's state, reads, cursors, trimming, close.

The append path (group commit, rollover) is ``writer.py``; opening (recovery,
rollover on open) is ``recovery.py``; cursor state is ``cursor.py``; trimming
rules are ``trim.py``. This module ties them together and serves reads: from
the entry cache when it holds the range, else from the file on an I/O thread.
"""

from __future__ import annotations

import asyncio
import bisect
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar

import structlog

from magnetar.broker.storage import metrics
from magnetar.broker.storage.api import (
    EARLIEST,
    LATEST,
    CursorAlreadyExists,
    Entry,
    InitialPosition,
    LedgerSummary,
    ManagedCursor,
    ManagedLedger,
    ManagedLedgerClosed,
    ManagedLedgerConfig,
    ManagedLedgerFenced,
    Position,
    StorageError,
    WriteStats,
)
from magnetar.broker.storage.births import Birth
from magnetar.broker.storage.context import LedgerContext
from magnetar.broker.storage.cursor import ManagedCursorImpl, cursor_path
from magnetar.broker.storage.layout import (
    LedgerInfo,
    LedgerLayout,
    LedgerRecord,
    encode_ledger_list,
)
from magnetar.broker.storage.metrics import LedgerStats
from magnetar.broker.storage.paths import ledger_dir, ledger_meta_path
from magnetar.broker.storage.records import CorruptEntryError
from magnetar.broker.storage.sealer import IndexSealer
from magnetar.broker.storage.segment import LedgerFile
from magnetar.broker.storage.writer import LedgerWriter, fail_all

log = structlog.get_logger(__name__)
T = TypeVar("T")

_OPEN, _CLOSING, _CLOSED, _FENCED = "open", "closing", "closed", "fenced"


class ManagedLedgerImpl(ManagedLedger):
    """The file-based :class:`ManagedLedger`. Open with ``recovery.open_ledger``."""

    def __init__(self, ctx: LedgerContext, name: str, config: ManagedLedgerConfig) -> None:
        self._ctx = ctx
        self._name = name
        self._config = config
        self._loop = asyncio.get_running_loop()
        self.meta_path = ledger_meta_path(name)
        self.dir = ledger_dir(ctx.data_dir, name)
        self.layout = LedgerLayout()
        self.meta_version = -1
        self._meta_lock = asyncio.Lock()
        self._state = _OPEN
        self._lac = Position(-1, -1)
        self._writer = LedgerWriter(self)
        self._entry_waiters: list[asyncio.Future[None]] = []
        self._trim_lock = asyncio.Lock()
        self._trim_task: asyncio.Task[Any] | None = None
        self._trim_again = False
        self.cursors_by_name: dict[str, ManagedCursorImpl] = {}
        # Cursors a consumer reads through now; written entries are cached
        # only while there is one (as Pulsar's ManagedLedgerImpl does).
        self._active_cursors: set[ManagedCursor] = set()
        self._entries_listener: Callable[[int, int], None] | None = None
        # Persisted mark-delete of every durable cursor, open or not: trimming
        # follows what survives a crash, never what is only in memory.
        self.durable_mark_deletes: dict[str, Position] = {}
        self._opening_cursors: dict[str, asyncio.Future[ManagedCursorImpl]] = {}
        self._sealer = IndexSealer(self)
        # A new ledger's record or files not made yet (births.py).
        self._birth: Birth | None = None
        self.stats = LedgerStats()

    # ------------------------------------------------------------------ accessors

    @property
    def name(self) -> str:
        return self._name

    @property
    def config(self) -> ManagedLedgerConfig:
        return self._config

    def set_retention(self, time_s: float, size_bytes: int) -> None:
        config = self._config
        if config.retention_time_s == time_s and config.retention_size_bytes == size_bytes:
            return  # every topic load sets it; most keep the default
        self._config = replace(
            self._config, retention_time_s=time_s, retention_size_bytes=size_bytes
        )

    @property
    def ctx(self) -> LedgerContext:
        return self._ctx

    @property
    def is_closed(self) -> bool:
        return self._state != _OPEN

    @property
    def last_confirmed_position(self) -> Position:
        return self._lac

    @property
    def first_position(self) -> Position:
        for info in self.layout.infos():
            if info.entry_count:
                return Position(info.ledger_id, 0)
        return Position(self.layout.current.ledger_id, 0)

    def next_position(self, position: Position) -> Position:
        return self.layout.next_position(position)

    def previous_position(self, position: Position) -> Position:
        return self.layout.previous_position(position)

    @property
    def number_of_entries(self) -> int:
        return sum(i.entry_count for i in self.layout.infos())

    @property
    def number_of_messages(self) -> int:
        return sum(i.file.message_count for i in self.layout.infos())

    @property
    def total_size(self) -> int:
        return sum(i.file.data_size for i in self.layout.infos())

    def ledger_summaries(self) -> list[LedgerSummary]:
        summaries = []
        for info in self.layout.infos():
            offsets = info.file.offsets
            size = offsets[-1] - offsets[0] if len(offsets) else 0
            summaries.append(LedgerSummary(info.ledger_id, info.entry_count, size, info.closed_at))
        return summaries

    def write_stats(self) -> WriteStats:
        return self.stats.snapshot()

    def run_blocking(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        return self._loop.run_in_executor(self._ctx.executor, fn, *args)

    def check_open(self) -> None:
        if self._state == _OPEN:
            return
        if self._state == _FENCED:
            raise ManagedLedgerFenced(f"managed ledger {self._name} is fenced after a write error")
        raise ManagedLedgerClosed(f"managed ledger {self._name} is closed")

    # --------------------------------------------------------------------- opening

    def start(self, lac: Position) -> None:
        """Called by recovery once the layout is built: begin serving."""
        self._lac = lac
        self._writer.start()
        if len(self.layout) > 1:  # trimming never takes the ledger being written
            self.schedule_trim()

    # ---------------------------------------------------------------------- append

    def add_entry(self, data: bytes, num_messages: int = 1) -> asyncio.Future[Position]:
        if self._state != _OPEN:
            self.check_open()
        if type(data) is not bytes:
            data = bytes(data)
        return self._writer.add(data, num_messages)

    @property
    def has_active_cursors(self) -> bool:
        return bool(self._active_cursors)

    def slowest_read(self) -> Position | None:
        """The read position of the active cursor furthest behind (None: no
        cursor is active). Cached entries before it will not be read again."""
        return min((c.read_position for c in self._active_cursors), default=None)

    def cursor_activity(self, cursor: ManagedCursor, active: bool) -> None:
        """A cursor became active or inactive (ManagedCursor.set_active)."""
        if active:
            self._active_cursors.add(cursor)
            return
        self._active_cursors.discard(cursor)
        if not self._active_cursors:
            # Nobody reads: what the cache holds would only be read from disk.
            for info in self.layout.infos():
                info.cache.clear()

    def seal_later(self, info: LedgerInfo) -> None:
        """``info`` takes no more appends (rolled over): see sealer.py."""
        self._sealer.seal_later(info)

    def set_entries_listener(self, listener: Callable[[int, int], None] | None) -> None:
        self._entries_listener = listener

    def entries_added(self, last: Position, count: int, nbytes: int) -> None:
        """The writer stored ``count`` entries up to ``last``: publish them."""
        self._lac = last
        if self._entries_listener is not None:
            self._entries_listener(count, nbytes)
        if self._entry_waiters:
            waiters, self._entry_waiters = self._entry_waiters, []
            for w in waiters:
                if not w.done():
                    w.set_result(None)

    def store_first_record(self, make_files: Callable[[], None], paths: tuple[str, str]) -> None:
        """A new ledger: its record stored soon, its files made after it or
        by its first append (births.py; see recovery)."""
        self._birth = self._ctx.births.add(self, make_files, paths)

    def hold_first_record(self) -> bool:
        """New: nothing of it stored until anything needs it (births.hold)."""
        return self._birth is not None and self._ctx.births.hold(self)

    def release_first_record(self) -> None:
        self._ctx.births.release(self)

    def birth_done(self, error: BaseException | None) -> None:
        """Record and files are made (appends go), or one failed (fenced)."""
        if self._birth is None:
            return
        self._birth = None
        if error is not None:
            log.error("storing a new managed ledger failed", ledger=self._name, error=repr(error))
            self.fence()
            self._writer.fail_queued(StorageError(f"creating {self._name} failed: {error}"))
        self._writer.resume()

    @property
    def record_pending(self) -> bool:
        """A new ledger whose record or first file is not made yet: no append goes."""
        return self._birth is not None

    def hurry_birth(self) -> None:
        """Appends wait: the record and the files now."""
        if self._birth is not None:
            self._ctx.births.hurry(self, self._birth, files=True)

    async def wait_first_record(self) -> None:
        birth = self._birth
        if birth is not None:
            self._ctx.births.hurry(self, birth, files=False)
            await asyncio.shield(birth.record)
        if self._state == _FENCED:
            self.check_open()

    def fence(self) -> None:
        self._state = _FENCED

    def forget_unsynced(self, lf: LedgerFile) -> None:
        self._writer.forget_unsynced(lf)

    def ledger_list(self) -> bytes:
        """The layout's ledger list, as stored."""
        records = [
            LedgerRecord(
                i.ledger_id,
                i.entry_count if i.closed_at is not None else -1,
                i.file.data_size if i.closed_at is not None else -1,
                i.closed_at,
            )
            for i in self.layout.infos()
        ]
        return encode_ledger_list(records)

    async def write_ledger_list(self) -> None:
        """Store the layout's ledger list (compare-and-set on our version)."""
        async with self._meta_lock:
            # Built under the lock so that every write stores the newest layout.
            stat = await self._ctx.store.put(self.meta_path, self.ledger_list(), self.meta_version)
            self.meta_version = stat.version

    # ------------------------------------------------------------------------ reads

    async def read_entries(
        self, start: Position, max_entries: int, max_bytes: int = 5 * 1024 * 1024
    ) -> list[Entry]:
        self.check_open()
        out: list[Entry] = []
        budget = max_bytes
        pos = self.layout.normalize(start)
        while len(out) < max_entries and budget > 0:
            info = self.layout.get(pos.ledger_id)
            if info is None:
                break
            got, nbytes = await self.read_in_ledger(
                info, pos.entry_id, max_entries - len(out), budget, not out
            )
            if not got:
                if info is self.layout.current or pos.entry_id < info.entry_count:
                    break  # the end, or the byte budget is spent
                pos = self.layout.normalize(Position(pos.ledger_id, info.entry_count))
                continue
            out.extend(got)
            budget -= nbytes
            pos = self.layout.next_position(got[-1].position)
        return out

    async def read_in_ledger(
        self,
        info: LedgerInfo,
        first: int,
        max_entries: int,
        max_bytes: int,
        at_least_one: bool = True,
    ) -> tuple[list[Entry], int]:
        """Up to ``max_entries`` from entry ``first`` of one ledger: cache, else disk.

        Returns the entries and their size counted as records (data plus a
        12-byte header each), which is what ``max_bytes`` bounds. [] when
        ``first`` does not exist, or nothing fits and not ``at_least_one``.
        """
        lf = info.file
        offsets = lf.offsets
        count = len(offsets) - 1
        if first >= count or max_entries <= 0:
            return [], 0
        end = min(count, first + max_entries)
        base = offsets[first]
        end = bisect.bisect_right(offsets, base + max_bytes, first + 1, end + 1) - 1
        if end <= first:
            if not at_least_one:
                return [], 0
            end = first + 1
        cached = info.cache.get_range(first, end - first)
        if len(cached) == end - first:
            self.stats.cache_reads += 1
            metrics.CACHE_READS.inc()
            return cached, offsets[end] - base
        limit = base + self._config.max_read_bytes
        end = max(first + 1, min(end, bisect.bisect_right(offsets, limit, first + 1, end + 1) - 1))
        span = offsets[first : end + 1]
        files = self._ctx.files
        try:
            files.acquire(lf)
        except OSError as exc:  # closed for good: trimmed meanwhile
            raise StorageError(
                f"read of {self._name} {info.ledger_id}:{first} failed: {exc}"
            ) from exc
        try:
            if lf.remote:
                entries = await lf.fetch(first, span)
            else:
                entries = await self.run_blocking(lf.read, first, span)
        except (CorruptEntryError, OSError) as exc:
            raise StorageError(
                f"read of {self._name} {info.ledger_id}:{first} failed: {exc}"
            ) from exc
        finally:
            files.release(lf)
            if lf.refs == 0 and (
                self._state == _CLOSED or self.layout.get(info.ledger_id) is not info
            ):
                files.close(lf)  # trimmed or closed while we read
        self.stats.disk_reads += 1
        self.stats.disk_read_entries += len(entries)
        metrics.DISK_READS.inc()
        metrics.DISK_READ_BYTES.inc(span[-1] - span[0])
        return entries, span[-1] - span[0]

    async def read_positions(self, positions: Sequence[Position]) -> list[Entry]:
        self.check_open()
        out: list[Entry] = []
        i = 0
        n = len(positions)
        while i < n:
            ledger_id, first = positions[i]
            j = i + 1
            while j < n and positions[j] == (ledger_id, first + j - i):
                j += 1
            info = self.layout.get(ledger_id)
            if info is not None and first >= 0:
                got, _ = await self.read_in_ledger(info, first, j - i, 1 << 62)
                out.extend(got)
            i = j
        return out

    def has_entry_after(self, position: Position) -> bool:
        lac = self._lac
        return lac[1] >= 0 and lac > position

    async def wait_for_entries_after(
        self, position: Position, fut: asyncio.Future[None] | None = None
    ) -> None:
        """See the interface; ``fut`` (internal): a future the caller may fail."""
        while not self.has_entry_after(position):
            self.check_open()
            if fut is None or fut.done():
                fut = self._loop.create_future()
            self._entry_waiters.append(fut)
            try:
                await fut
            finally:
                if fut in self._entry_waiters:
                    self._entry_waiters.remove(fut)

    # ---------------------------------------------------------------------- cursors

    async def open_cursor(
        self,
        name: str,
        initial_position: InitialPosition = InitialPosition.LATEST,
        properties: Mapping[str, int] | None = None,
    ) -> ManagedCursor:
        self.check_open()
        existing = self.cursors_by_name.get(name)
        if existing is not None:
            if not existing.is_durable:
                raise CursorAlreadyExists(f"{name} is a non-durable cursor of {self._name}")
            return existing
        pending = self._opening_cursors.get(name)
        if pending is not None:
            return await asyncio.shield(pending)
        fut: asyncio.Future[ManagedCursorImpl] = self._loop.create_future()
        self._opening_cursors[name] = fut
        try:
            await self.wait_first_record()
            cursor = await ManagedCursorImpl.open_durable(self, name, initial_position, properties)
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()  # mark retrieved: the opener re-raises it
            raise
        finally:
            del self._opening_cursors[name]
        self.cursors_by_name[name] = cursor
        fut.set_result(cursor)
        return cursor

    def new_non_durable_cursor(
        self, start: Position, *, inclusive: bool = False, name: str | None = None
    ) -> ManagedCursor:
        self.check_open()
        if start == LATEST:
            read = self.layout.next_position(self._lac)
        elif start == EARLIEST:
            read = self.first_position
        elif inclusive:
            read = self.layout.normalize(start)
        else:
            read = self.layout.normalize(self.layout.next_position(start))
        cname = (
            name if name is not None else f"non-durable-{id(self):x}-{len(self.cursors_by_name)}"
        )
        if cname in self.cursors_by_name:
            raise CursorAlreadyExists(f"cursor {cname} exists on {self._name}")
        cursor = ManagedCursorImpl(
            self, cname, durable=False, mark_delete=self.previous_position(read)
        )
        self.cursors_by_name[cname] = cursor
        return cursor

    async def delete_cursor(self, name: str) -> None:
        self.check_open()
        await self.wait_first_record()
        cursor = self.cursors_by_name.pop(name, None)
        if cursor is not None:
            await cursor.discard()
        if name in self.durable_mark_deletes or cursor is None or cursor.is_durable:
            self.durable_mark_deletes.pop(name, None)
            path = cursor_path(self.meta_path, name)
            if await self._ctx.store.exists(path):
                await self._ctx.store.delete(path)
        self.schedule_trim()

    @property
    def cursors(self) -> Sequence[ManagedCursor]:
        return list(self.cursors_by_name.values())

    def get_cursor(self, name: str) -> ManagedCursor | None:
        return self.cursors_by_name.get(name)

    def cursor_detached(self, cursor: ManagedCursor) -> None:
        if self.cursors_by_name.get(cursor.name) is cursor:
            del self.cursors_by_name[cursor.name]

    def cursor_persisted(self, name: str, mark_delete: Position) -> None:
        old = self.durable_mark_deletes.get(name)
        self.durable_mark_deletes[name] = mark_delete
        if len(self.layout) > 1 and (
            old is None or old[0] != mark_delete[0] or self._ends_closed_ledger(mark_delete)
        ):
            self.schedule_trim()

    def _ends_closed_ledger(self, position: Position) -> bool:
        """`position` is the last entry of a ledger no longer written to: that
        ledger may be trimmable now, without waiting for the next move."""
        info = self.layout.get(position[0])
        return (
            info is not None
            and info is not self.layout.current
            and position[1] >= info.entry_count - 1
        )

    # --------------------------------------------------------------------- trimming

    def schedule_trim(self) -> None:
        if self._state != _OPEN:
            return
        if self._trim_task is not None and not self._trim_task.done():
            self._trim_again = True
            return
        self._trim_task = self._loop.create_task(self._trim_soon(), name=f"ml-trim:{self._name}")

    async def _trim_soon(self) -> None:
        self._trim_again = True
        while self._trim_again and self._state == _OPEN:
            self._trim_again = False
            try:
                await self.trim_consumed_ledgers()
            except (StorageError, OSError):
                log.exception("trimming failed", ledger=self._name)
                return

    async def trim_consumed_ledgers(self) -> int:
        from magnetar.broker.storage.trim import trim_ledgers

        self.check_open()
        async with self._trim_lock:
            return await trim_ledgers(self)

    # ------------------------------------------------------------------ close/delete

    async def close(self) -> None:
        if self._state in (_CLOSING, _CLOSED):
            return
        fenced = self._state == _FENCED
        self._state = _CLOSING
        err = ManagedLedgerClosed(f"managed ledger {self._name} is closed")
        if self._ctx.births.drop_held(self):  # never stored: nothing is left
            self._birth = None
        birth = self._birth
        if birth is not None:  # files never asked for are not made
            self._ctx.births.hurry(self, birth, files=False)
            if pending := birth.pending():
                await asyncio.wait(pending)
        await self._writer.stop(err)
        waiters, self._entry_waiters = self._entry_waiters, []
        fail_all(waiters, err)
        for cursor in list(self.cursors_by_name.values()):
            try:
                await cursor.close()
            except StorageError:
                log.exception("cursor close failed", ledger=self._name, cursor=cursor.name)
        self.cursors_by_name.clear()
        if self._trim_task is not None and not self._trim_task.done():
            self._trim_task.cancel()
            await asyncio.wait([self._trim_task])
        await self._sealer.close(seal_current=not fenced)
        for info in self.layout.infos():
            info.cache.clear()
            if info.file.refs == 0:
                self._ctx.files.close(info.file)
        self._state = _CLOSED
        self._ctx.on_closed(self)

    async def delete(self) -> None:
        await self.close()
        await self._ctx.store.delete_recursive(self.meta_path)
        await self.remove_storage()

    # ------------------------------------------- where the records live (files)
    # The object engine (objects/ledger.py) overrides these three.

    async def new_ledger_file(self, ledger_id: int) -> LedgerFile:
        """A new, empty ledger's file (a rollover)."""
        path = os.path.join(self.dir, f"{ledger_id}.log")
        return await self.run_blocking(LedgerFile.create, path, ledger_id, False)

    async def discard_files(self, files: list[LedgerFile]) -> None:
        """Ledgers no record names any more (trimmed, a rollover undone)."""
        from magnetar.broker.storage.trim import unlink_ledger_files

        await self.run_blocking(unlink_ledger_files, [f.path for f in files])

    async def remove_storage(self) -> None:
        """Everything of a deleted managed ledger below the metadata."""
        from magnetar.broker.storage.trim import remove_tree

        await self.run_blocking(remove_tree, self.dir)
