"""The append path of a managed ledger: group commit, rollover, interval sync.

Appends queue up on the event loop. One writer task takes everything queued
(bounded by MAX_GROUP_BYTES and the segment size), encodes the records on the
loop, writes them with one gathering write (and one fdatasync under ``fsync``)
on an I/O thread that runs nothing but those syscalls, then extends the index,
fills the cache and resolves the receipts in order, in one C-level pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from itertools import repeat
from typing import TYPE_CHECKING, Any

import structlog

from magnetar.broker.storage import metrics
from magnetar.broker.storage.api import (
    Entry,
    ManagedLedgerFenced,
    Position,
    StorageError,
    SyncPolicy,
)
from magnetar.broker.storage.layout import LedgerInfo
from magnetar.broker.storage.records import HEADER_SIZE
from magnetar.broker.storage.segment import LedgerFile, WriteFailed

# Typing only: the writer appends for the ledger that owns it.
if TYPE_CHECKING:
    from collections.abc import Sequence

    from magnetar.broker.storage.ledger import ManagedLedgerImpl

log = structlog.get_logger(__name__)

# One write takes at most this much queued data (bounded memory and latency).
MAX_GROUP_BYTES = 4 * 1024 * 1024

_new_tuple = tuple.__new__
_set_result = asyncio.Future.set_result


class LedgerWriter:
    """Owns the append queue, the writer task and (``interval``) the sync task."""

    def __init__(self, ml: ManagedLedgerImpl) -> None:
        self._ml = ml
        self._loop = asyncio.get_running_loop()
        self._config = ml.config
        self._sync = ml.config.sync_policy is SyncPolicy.FSYNC
        self._datas: list[bytes] = []
        self._nmsgs: list[int] = []
        self._futs: list[asyncio.Future[Position]] = []
        self._bytes = 0
        # When the oldest entry still queued was queued (the latency clock).
        self._oldest_queued = 0.0
        self._wakeup: asyncio.Future[None] | None = None
        self._stopping = False
        self._task: asyncio.Task[None] | None = None
        self._sync_task: asyncio.Task[None] | None = None
        self._unsynced: set[LedgerFile] = set()

    def start(self) -> None:
        name = self._ml.name
        self._task = self._loop.create_task(self._write_loop(), name=f"ml-writer:{name}")
        if self._config.sync_policy is SyncPolicy.INTERVAL:
            self._sync_task = self._loop.create_task(self._sync_loop(), name=f"ml-sync:{name}")

    def add(self, data: bytes, num_messages: int) -> asyncio.Future[Position]:
        fut: asyncio.Future[Position] = self._loop.create_future()
        if not self._futs:
            self._oldest_queued = time.perf_counter()
        self._datas.append(data)
        self._nmsgs.append(num_messages)
        self._futs.append(fut)
        self._bytes += len(data)
        wakeup = self._wakeup
        if wakeup is not None:
            self._wakeup = None
            wakeup.set_result(None)
        return fut

    def fail_queued(self, exc: BaseException) -> None:
        """Fail every append not yet handed to a write."""
        fail_all(self._futs, exc)
        self._datas, self._nmsgs, self._futs = [], [], []
        self._bytes = 0

    async def stop(self, exc: BaseException) -> None:
        """Fail what is queued, let the write in flight finish, stop the tasks, sync."""
        self._stopping = True
        self.fail_queued(exc)
        if self._wakeup is not None:
            self._wakeup.set_result(None)
            self._wakeup = None
        if self._task is not None:
            await asyncio.wait([self._task])
        if self._sync_task is not None:
            self._sync_task.cancel()
            await asyncio.wait([self._sync_task])
        await self.sync_dirty()

    def forget_unsynced(self, lf: LedgerFile) -> None:
        """A trimmed file needs no fsync any more."""
        self._unsynced.discard(lf)

    # -------------------------------------------------------------------- internals

    async def _write_loop(self) -> None:
        loop = self._loop
        while True:
            if not self._futs:
                if self._stopping:
                    return
                if self._sync and not self._ml.is_closed:
                    lf = self._ml.layout.current.file
                    if lf.needs_preallocation():
                        await self._ml.run_blocking(lf.preallocate_ahead)
                        continue
                wakeup: asyncio.Future[None] = loop.create_future()
                self._wakeup = wakeup
                await wakeup
                continue
            # A remainder left queued keeps the group's start: an upper bound.
            queued_at = self._oldest_queued
            datas, nmsgs, futs, nbytes = self._take_group()
            try:
                await self._write_group(datas, nmsgs, futs, nbytes, queued_at)
            except Exception as exc:  # never let the writer die with receipts pending
                log.exception("managed ledger write failed", ledger=self._ml.name)
                fail_all(futs, StorageError(f"append to {self._ml.name} failed: {exc}"))

    def _take_group(
        self,
    ) -> tuple[list[bytes], list[int], list[asyncio.Future[Position]], int]:
        """Everything queued, or a prefix that fits in one group (at least one entry).

        A group's records fit in MAX_GROUP_BYTES and in one segment file.
        """
        datas, nmsgs, futs = self._datas, self._nmsgs, self._futs
        nbytes = self._bytes
        cap = min(MAX_GROUP_BYTES, self._config.max_segment_size)
        if nbytes + HEADER_SIZE * len(datas) <= cap:
            self._datas, self._nmsgs, self._futs = [], [], []
            self._bytes = 0
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
        self._datas, self._nmsgs, self._futs = datas[k:], nmsgs[k:], futs[k:]
        self._bytes = nbytes - taken
        return datas[:k], nmsgs[:k], futs[:k], taken

    async def _write_group(
        self,
        datas: list[bytes],
        nmsgs: list[int],
        futs: list[asyncio.Future[Position]],
        group_bytes: int,
        queued_at: float,
    ) -> None:
        ml = self._ml
        info = ml.layout.current
        # Roll over before a group that would take the file past the limit.
        new_size = info.file.size + group_bytes + HEADER_SIZE * len(datas)
        if info.entry_count and new_size > self._config.max_segment_size:
            await self._rollover()
            info = ml.layout.current
        lf = info.file
        first_id = len(lf.offsets) - 1
        start = lf.offsets[-1]
        started = time.perf_counter()
        try:
            parts, ends = lf.encode(datas, nmsgs)
            ends = await ml.run_blocking(lf.write_records, parts, ends, self._sync)
        except WriteFailed as exc:
            metrics.WRITE_ERRORS.inc()
            ml.ctx.write_health.failed(f"append to {ml.name} failed: {exc}")
            fail_all(futs, StorageError(f"append to {ml.name} failed: {exc}"))
            if not exc.recovered:
                log.error("managed ledger fenced after a write error", ledger=ml.name)
                ml.fence()
                self.fail_queued(ManagedLedgerFenced(str(exc)))
            return
        guard = ml.ctx.write_guard
        refused = guard() if guard is not None else None
        if refused is not None:
            # Written, but maybe past a new owner's fence: never confirmed.
            log.error("managed ledger fenced: writes refused", ledger=ml.name, why=refused)
            ml.fence()
            fail_all(futs, ManagedLedgerFenced(refused))
            self.fail_queued(ManagedLedgerFenced(refused))
            return
        lf.extend_index(ends, nmsgs)
        health = ml.ctx.write_health
        if health.failing:
            health.recovered()
        if not self._sync:
            self._unsynced.add(lf)
        n = len(datas)
        # Built by C-level map(): no per-entry Python frame on the hot path.
        positions: list[Position] = list(
            map(
                _new_tuple,
                repeat(Position, n),
                zip(repeat(info.ledger_id, n), range(first_id, first_id + n), strict=True),
            )
        )
        entries: list[Entry] = list(
            map(_new_tuple, repeat(Entry, n), zip(positions, datas, nmsgs, strict=True))
        )
        nbytes = ends[-1] - start - HEADER_SIZE * n
        info.cache.append(entries, nbytes)
        stats = ml.stats
        stats.groups_written += 1
        stats.entries_written += n
        stats.bytes_written += nbytes
        done = time.perf_counter()
        stats.write_latency.observe(done - queued_at)
        metrics.WRITE_SECONDS.observe(done - started)
        metrics.GROUPS_WRITTEN.inc()
        metrics.ENTRIES_WRITTEN.inc(n)
        metrics.BYTES_WRITTEN.inc(nbytes)
        ml.entries_added(positions[-1])
        try:
            list(map(_set_result, futs, positions))
        except asyncio.InvalidStateError:  # a caller cancelled its await
            for fut, pos in zip(futs, positions, strict=True):
                if not fut.done():
                    fut.set_result(pos)

    async def _rollover(self) -> None:
        """Close the current ledger and start a new one (metadata first)."""
        ml = self._ml
        ctx = ml.ctx
        new_id = await ctx.allocate_ledger_id()
        path = os.path.join(ml.dir, f"{new_id}.log")
        lf = await ml.run_blocking(LedgerFile.create, path, new_id)
        old = ml.layout.current
        old.closed_at = ctx.clock()
        ml.layout.append(LedgerInfo(new_id, lf, ctx.cache.new_cache(new_id)))
        try:
            await ml.write_ledger_list()
        except BaseException:
            ml.layout.remove(new_id)
            old.closed_at = None
            await ml.run_blocking(_close_and_unlink, lf)
            raise
        ml.stats.rollovers += 1
        metrics.ROLLOVERS.inc()
        log.debug("ledger rolled over", ledger=ml.name, closed=old.ledger_id, new=new_id)
        try:
            await ml.run_blocking(old.file.trim_tail)
        except OSError:
            log.exception("cutting preallocated space failed", ledger=ml.name)
        ml.schedule_trim()

    async def _sync_loop(self) -> None:
        interval = self._config.sync_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            await self.sync_dirty()

    async def sync_dirty(self) -> None:
        while self._unsynced:
            lf = self._unsynced.pop()
            try:
                await self._ml.run_blocking(lf.sync)
            except OSError:
                log.exception("fsync failed", ledger=self._ml.name, file=lf.path)


def fail_all(futs: Sequence[asyncio.Future[Any]], exc: BaseException) -> None:
    for fut in futs:
        if not fut.done():
            fut.set_exception(exc)


def _close_and_unlink(lf: LedgerFile) -> None:
    lf.close()
    with contextlib.suppress(FileNotFoundError):
        os.unlink(lf.path)
