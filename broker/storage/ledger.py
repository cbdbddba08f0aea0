"""ManagedLedgerImpl: group-committed appends, reads, rollover, trimming, cursors.

Appends queue up on the event loop; one writer task takes everything queued,
writes it with one write (and one fsync under ``fsync``) on an I/O thread, then
extends the index, fills the cache, advances the last confirmed position and
resolves the receipts in order. Opening (recovery, rollover on open) lives in
``recovery.py``; cursor state in ``cursor.py``.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from itertools import repeat
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote

import structlog

from magnetar.broker.storage.api import (
    EARLIEST,
    LATEST,
    Clock,
    CursorAlreadyExists,
    Entry,
    InitialPosition,
    ManagedCursor,
    ManagedLedger,
    ManagedLedgerClosed,
    ManagedLedgerConfig,
    ManagedLedgerFenced,
    MetadataStore,
    Position,
    StorageError,
    SyncPolicy,
)
from magnetar.broker.storage.cache import EntryCacheManager
from magnetar.broker.storage.layout import (
    LedgerInfo,
    LedgerLayout,
    LedgerRecord,
    encode_ledger_list,
)
from magnetar.broker.storage.records import HEADER_SIZE, CorruptEntryError
from magnetar.broker.storage.segment import LedgerFile, WriteFailed

if TYPE_CHECKING:
    from magnetar.broker.storage.cursor import ManagedCursorImpl

log = structlog.get_logger(__name__)
T = TypeVar("T")

_OPEN, _CLOSING, _CLOSED, _FENCED = "open", "closing", "closed", "fenced"
# One write takes at most this much queued data (bounded memory and latency).
MAX_GROUP_BYTES = 4 * 1024 * 1024
ML_ROOT = "/managed-ledgers"


@dataclass(slots=True)
class LedgerContext:
    """What a managed ledger borrows from its factory."""

    data_dir: str
    executor: Executor
    cache: EntryCacheManager
    store: MetadataStore
    clock: Clock
    allocate_ledger_id: Callable[[], Awaitable[int]]
    on_closed: Callable[[ManagedLedgerImpl], None]


@dataclass(slots=True)
class LedgerStats:
    """Counters for metrics and tests."""

    groups_written: int = 0
    entries_written: int = 0
    bytes_written: int = 0
    cache_reads: int = 0
    disk_reads: int = 0
    disk_read_entries: int = 0
    rollovers: int = 0


def ledger_meta_path(name: str) -> str:
    return f"{ML_ROOT}/{quote(name, safe='')}"


def ledger_dir(data_dir: str, name: str) -> str:
    return os.path.join(data_dir, "ledgers", quote(name, safe=""))


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
        # Appends waiting for the next group.
        self._pending_datas: list[bytes] = []
        self._pending_nmsgs: list[int] = []
        self._pending_futs: list[asyncio.Future[Position]] = []
        self._pending_bytes = 0
        self._writer_wakeup: asyncio.Future[None] | None = None
        self._writer_task: asyncio.Task[None] | None = None
        self._sync_task: asyncio.Task[None] | None = None
        self._unsynced: set[LedgerFile] = set()
        self._entry_waiters: list[asyncio.Future[None]] = []
        self._trim_lock = asyncio.Lock()
        self._trim_task: asyncio.Task[Any] | None = None
        self._trim_again = False
        self.cursors_by_name: dict[str, ManagedCursorImpl] = {}
        # Persisted mark-delete of every durable cursor, open or not: trimming
        # follows what survives a crash, never what is only in memory.
        self.durable_mark_deletes: dict[str, Position] = {}
        self._opening_cursors: dict[str, asyncio.Future[ManagedCursorImpl]] = {}
        self._sync = config.sync_policy is SyncPolicy.FSYNC
        self.stats = LedgerStats()

    # ------------------------------------------------------------------ accessors

    @property
    def name(self) -> str:
        return self._name

    @property
    def config(self) -> ManagedLedgerConfig:
        return self._config

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
        self._writer_task = self._loop.create_task(
            self._write_loop(), name=f"ml-writer:{self._name}"
        )
        if self._config.sync_policy is SyncPolicy.INTERVAL:
            self._sync_task = self._loop.create_task(
                self._sync_loop(), name=f"ml-sync:{self._name}"
            )
        self.schedule_trim()

    # ---------------------------------------------------------------------- append

    def add_entry(self, data: bytes, num_messages: int = 1) -> asyncio.Future[Position]:
        if self._state != _OPEN:
            self.check_open()
        if type(data) is not bytes:
            data = bytes(data)
        fut: asyncio.Future[Position] = self._loop.create_future()
        self._pending_datas.append(data)
        self._pending_nmsgs.append(num_messages)
        self._pending_futs.append(fut)
        self._pending_bytes += len(data)
        wakeup = self._writer_wakeup
        if wakeup is not None:
            self._writer_wakeup = None
            wakeup.set_result(None)
        return fut

    async def _write_loop(self) -> None:
        loop = self._loop
        while True:
            if not self._pending_futs:
                if self._state != _OPEN:
                    return
                wakeup: asyncio.Future[None] = loop.create_future()
                self._writer_wakeup = wakeup
                await wakeup
                continue
            datas, nmsgs, futs, nbytes = self._take_group()
            try:
                await self._write_group(datas, nmsgs, futs, nbytes)
            except Exception as exc:  # never let the writer die with receipts pending
                log.exception("managed ledger write failed", ledger=self._name)
                _fail_all(futs, StorageError(f"append to {self._name} failed: {exc}"))

    def _take_group(
        self,
    ) -> tuple[list[bytes], list[int], list[asyncio.Future[Position]], int]:
        """Everything queued, or a prefix that fits in one group (at least one entry).

        A group's records fit in MAX_GROUP_BYTES and in one segment file.
        """
        datas, nmsgs, futs = self._pending_datas, self._pending_nmsgs, self._pending_futs
        nbytes = self._pending_bytes
        cap = min(MAX_GROUP_BYTES, self._config.max_segment_size)
        if nbytes + HEADER_SIZE * len(datas) <= cap:
            self._pending_datas, self._pending_nmsgs, self._pending_futs = [], [], []
            self._pending_bytes = 0
            return datas, nmsgs, futs, nbytes
        taken = 0
        k = 0
        records = 0
        while k < len(datas):
            size = len(datas[k]) + HEADER_SIZE
            if k and records + size > cap:
                break
            records += size
            taken += len(datas[k])
            k += 1
        self._pending_datas, self._pending_nmsgs, self._pending_futs = (
            datas[k:],
            nmsgs[k:],
            futs[k:],
        )
        self._pending_bytes = nbytes - taken
        return datas[:k], nmsgs[:k], futs[:k], taken

    async def _write_group(
        self,
        datas: list[bytes],
        nmsgs: list[int],
        futs: list[asyncio.Future[Position]],
        group_bytes: int,
    ) -> None:
        info = self.layout.current
        # Roll over before a group that would take the file past the limit.
        new_size = info.file.size + group_bytes + HEADER_SIZE * len(datas)
        if info.entry_count and new_size > self._config.max_segment_size:
            await self._rollover()
            info = self.layout.current
        lf = info.file
        first_id = len(lf.offsets) - 1
        start = lf.offsets[-1]
        try:
            ends = await self.run_blocking(lf.append, datas, nmsgs, self._sync)
        except WriteFailed as exc:
            err = StorageError(f"append to {self._name} failed: {exc}")
            _fail_all(futs, err)
            if not exc.recovered:
                log.error("managed ledger fenced after a write error", ledger=self._name)
                self._state = _FENCED
                _fail_all(self._pending_futs, ManagedLedgerFenced(str(exc)))
                self._pending_datas, self._pending_nmsgs, self._pending_futs = [], [], []
                self._pending_bytes = 0
            return
        lf.extend_index(ends, nmsgs)
        if not self._sync:
            self._unsynced.add(lf)
        ledger_id = info.ledger_id
        # Built by C-level map(): no per-entry Python frame on the hot path.
        positions: list[Position] = list(
            map(
                _new_tuple,
                repeat(Position),
                zip(repeat(ledger_id), range(first_id, first_id + len(datas))),
            )
        )
        entries: list[Entry] = list(
            map(_new_tuple, repeat(Entry), zip(positions, datas, nmsgs, strict=True))
        )
        nbytes = ends[-1] - start - HEADER_SIZE * len(entries)
        info.cache.append(entries, nbytes)
        stats = self.stats
        stats.groups_written += 1
        stats.entries_written += len(entries)
        stats.bytes_written += nbytes
        self._lac = entries[-1].position
        try:
            list(map(_set_result, futs, positions))
        except asyncio.InvalidStateError:  # a caller cancelled its await
            for fut, pos in zip(futs, positions, strict=True):
                if not fut.done():
                    fut.set_result(pos)
        if self._entry_waiters:
            waiters, self._entry_waiters = self._entry_waiters, []
            for w in waiters:
                if not w.done():
                    w.set_result(None)

    async def _rollover(self) -> None:
        """Close the current ledger and start a new one (metadata first)."""
        new_id = await self._ctx.allocate_ledger_id()
        path = os.path.join(self.dir, f"{new_id}.log")
        lf = await self.run_blocking(LedgerFile.create, path, new_id)
        old = self.layout.current
        old.closed_at = self._ctx.clock()
        self.layout.append(LedgerInfo(new_id, lf, self._ctx.cache.new_cache(new_id)))
        try:
            await self.write_ledger_list()
        except BaseException:
            self.layout.remove(new_id)
            old.closed_at = None
            await self.run_blocking(_close_and_unlink, lf)
            raise
        self.stats.rollovers += 1
        log.debug("ledger rolled over", ledger=self._name, closed=old.ledger_id, new=new_id)
        try:
            await self.run_blocking(old.file.trim_tail)
        except OSError:
            log.exception("cutting preallocated space failed", ledger=self._name)
        self.schedule_trim()

    async def write_ledger_list(self) -> None:
        """Store the layout's ledger list (compare-and-set on our version)."""
        async with self._meta_lock:
            # Built under the lock so that every write stores the newest layout.
            records = [
                LedgerRecord(
                    i.ledger_id,
                    i.entry_count if i.closed_at is not None else -1,
                    i.file.data_size if i.closed_at is not None else -1,
                    i.closed_at,
                )
                for i in self.layout.infos()
            ]
            stat = await self._ctx.store.put(
                self.meta_path, encode_ledger_list(records), self.meta_version
            )
            self.meta_version = stat.version

    async def _sync_loop(self) -> None:
        interval = self._config.sync_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            await self._sync_dirty()

    def forget_unsynced(self, lf: LedgerFile) -> None:
        """A trimmed file needs no fsync any more."""
        self._unsynced.discard(lf)

    async def _sync_dirty(self) -> None:
        while self._unsynced:
            lf = self._unsynced.pop()
            try:
                await self.run_blocking(lf.sync)
            except OSError:
                log.exception("fsync failed", ledger=self._name, file=lf.path)

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
            return cached, offsets[end] - base
        limit = base + self._config.max_read_bytes
        end = max(first + 1, min(end, bisect.bisect_right(offsets, limit, first + 1, end + 1) - 1))
        span = offsets[first : end + 1]
        lf.refs += 1
        try:
            entries = await self.run_blocking(lf.read, first, span)
        except (CorruptEntryError, OSError) as exc:
            raise StorageError(
                f"read of {self._name} {info.ledger_id}:{first} failed: {exc}"
            ) from exc
        finally:
            lf.refs -= 1
            if lf.refs == 0 and self.layout.get(info.ledger_id) is not info:
                lf.close()  # trimmed while we read
        self.stats.disk_reads += 1
        self.stats.disk_read_entries += len(entries)
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
        from magnetar.broker.storage.cursor import ManagedCursorImpl

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
        from magnetar.broker.storage.cursor import ManagedCursorImpl

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
        cursor = self.cursors_by_name.pop(name, None)
        if cursor is not None:
            await cursor.discard()
        if name in self.durable_mark_deletes or cursor is None or cursor.is_durable:
            from magnetar.broker.storage.cursor import cursor_path

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

    def cursor_detached(self, cursor: ManagedCursorImpl) -> None:
        if self.cursors_by_name.get(cursor.name) is cursor:
            del self.cursors_by_name[cursor.name]

    def cursor_persisted(self, name: str, mark_delete: Position) -> None:
        old = self.durable_mark_deletes.get(name)
        self.durable_mark_deletes[name] = mark_delete
        if len(self.layout) > 1 and (old is None or old[0] != mark_delete[0]):
            self.schedule_trim()

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
        self._state = _CLOSING
        err = ManagedLedgerClosed(f"managed ledger {self._name} is closed")
        _fail_all(self._pending_futs, err)
        self._pending_datas, self._pending_nmsgs, self._pending_futs = [], [], []
        self._pending_bytes = 0
        if self._writer_wakeup is not None:
            self._writer_wakeup.set_result(None)
            self._writer_wakeup = None
        if self._writer_task is not None:
            await asyncio.wait([self._writer_task])
        waiters, self._entry_waiters = self._entry_waiters, []
        _fail_all(waiters, err)
        for cursor in list(self.cursors_by_name.values()):
            try:
                await cursor.close()
            except StorageError:
                log.exception("cursor close failed", ledger=self._name, cursor=cursor.name)
        self.cursors_by_name.clear()
        for task in (self._sync_task, self._trim_task):
            if task is not None and not task.done():
                task.cancel()
                await asyncio.wait([task])
        await self._sync_dirty()
        for info in self.layout.infos():
            info.cache.clear()
            if info.file.refs == 0:
                info.file.close()
        self._state = _CLOSED
        self._ctx.on_closed(self)

    async def delete(self) -> None:
        await self.close()
        await self._ctx.store.delete_recursive(self.meta_path)
        await self.run_blocking(_remove_tree, self.dir)


_new_tuple = tuple.__new__
_set_result = asyncio.Future.set_result


def _fail_all(futs: Sequence[asyncio.Future[Any]], exc: BaseException) -> None:
    for fut in futs:
        if not fut.done():
            fut.set_exception(exc)


def _close_and_unlink(lf: LedgerFile) -> None:
    lf.close()
    with contextlib.suppress(FileNotFoundError):
        os.unlink(lf.path)


def _remove_tree(path: str) -> None:
    if not os.path.isdir(path):
        return
    for entry in os.listdir(path):
        os.unlink(os.path.join(path, entry))
    os.rmdir(path)
