"""The append path of one managed ledger: its queue, its groups, rollover.

Appends queue up on the event loop. The broker's journal (journal.py) takes
a group from every ledger with appends queued (bounded by MAX_GROUP_BYTES
and the segment size), writes all of them in one round on an I/O thread (each
ledger's records to its own file, the same buffers to the journal, one
fdatasync for the round under ``fsync``), then hands each group back here:
the index is extended, the cache filled and the receipts resolved in order,
in one C-level pass.
"""

from __future__ import annotations

import asyncio
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
from magnetar.broker.storage.context import OwningLedger
from magnetar.broker.storage.group import PendingGroup
from magnetar.broker.storage.layout import LedgerInfo
from magnetar.broker.storage.records import HEADER_SIZE
from magnetar.broker.storage.segment import LedgerFile

if TYPE_CHECKING:
    from collections.abc import Sequence


log = structlog.get_logger(__name__)

# One group takes at most this much queued data (bounded memory and latency).
MAX_GROUP_BYTES = 4 * 1024 * 1024

_new_tuple = tuple.__new__
_set_result = asyncio.Future.set_result


class LedgerWriter:
    """Owns the append queue and rollovers of one managed ledger; the journal
    writes its groups."""

    def __init__(self, ml: OwningLedger) -> None:
        self._ml = ml
        self._loop = asyncio.get_running_loop()
        self._config = ml.config
        self.name_bytes = ml.name.encode()
        self._datas: list[bytes] = []
        self._nmsgs: list[int] = []
        self._futs: list[asyncio.Future[Position]] = []
        self._bytes = 0
        # When the ledger being written was started (ctx.clock, wall time).
        self._ledger_since = ml.ctx.clock()
        # When the oldest entry still queued was queued (the latency clock).
        self._oldest_queued = 0.0
        self._scheduled = False
        self._stopping = False
        # Set while a group of ours is in a journal round.
        self._in_flight: asyncio.Future[None] | None = None
        self._rolling: asyncio.Task[None] | None = None

    @property
    def sync_policy(self) -> SyncPolicy:
        return self._ml.config.sync_policy

    def start(self) -> None:
        """Nothing runs until the first append: the journal drives the writes."""

    def add(self, data: bytes, num_messages: int) -> asyncio.Future[Position]:
        fut: asyncio.Future[Position] = self._loop.create_future()
        if not self._futs:
            self._oldest_queued = time.perf_counter()
        self._datas.append(data)
        self._nmsgs.append(num_messages)
        self._futs.append(fut)
        self._bytes += len(data)
        if not self._scheduled:
            self.resume()
        return fut

    def resume(self) -> None:
        """Ask the journal for a turn when appends wait and nothing holds them
        back (a group in a round, a rollover, a new ledger's first record)."""
        if (
            self._futs
            and not self._scheduled
            and not self._stopping
            and self._rolling is None
            and self._in_flight is None
        ):
            if self._ml.record_pending:
                self._ml.hurry_birth()  # a new ledger: its record and file first
                return
            self._scheduled = True
            self._ml.ctx.journal.schedule(self)

    def fail_queued(self, exc: BaseException) -> None:
        """Fail every append not yet handed to a write."""
        fail_all(self._futs, exc)
        self._datas, self._nmsgs, self._futs = [], [], []
        self._bytes = 0

    async def stop(self, exc: BaseException) -> None:
        """Fail what is queued, let the write in flight finish, stop a rollover."""
        self._stopping = True
        self.fail_queued(exc)
        if self._in_flight is not None:
            await asyncio.wait([self._in_flight])
        if self._rolling is not None:
            self._rolling.cancel()
            await asyncio.wait([self._rolling])

    def forget_unsynced(self, lf: LedgerFile) -> None:
        """A trimmed file needs no fsync any more."""
        self._ml.ctx.journal.forget(lf)

    # --------------------------------------------------- called by the journal

    def take(self) -> PendingGroup | None:
        """The next group to write, or None (nothing queued, or a rollover first)."""
        self._scheduled = False
        if not self._futs or self._stopping or self._ml.is_closed or self._ml.record_pending:
            return None
        queued_at = self._oldest_queued
        datas, nmsgs, futs, nbytes = self._take_group()
        info = self._ml.layout.current
        # Roll over before a group that would take the file past a limit.
        new_size = info.file.size + nbytes + HEADER_SIZE * len(datas)
        entries = info.entry_count
        config = self._config
        if entries and (
            new_size > config.max_segment_size
            or (
                entries + len(datas) > config.max_entries_per_ledger
                and self._ml.ctx.clock() - self._ledger_since >= config.min_rollover_time_s
            )
        ):
            self._datas[:0], self._nmsgs[:0], self._futs[:0] = datas, nmsgs, futs
            self._bytes += nbytes
            self._oldest_queued = queued_at
            self._rolling = self._loop.create_task(
                self._roll_then_resume(), name=f"ml-rollover:{self._ml.name}"
            )
            return None
        self._in_flight = self._loop.create_future()
        return PendingGroup(self, info, datas, nmsgs, futs, nbytes, queued_at)

    def finish(self, group: PendingGroup, refused: str | None) -> None:
        """The round holding ``group`` is over: publish it or fail it."""
        try:
            self._finish(group, refused)
        finally:
            in_flight, self._in_flight = self._in_flight, None
            if in_flight is not None:
                in_flight.set_result(None)
            self.resume()

    # -------------------------------------------------------------------- internals

    def _take_group(
        self,
    ) -> tuple[list[bytes], list[int], list[asyncio.Future[Position]], int]:
        """Everything queued, or a prefix that fits in one group (at least one entry).

        A group's records fit in MAX_GROUP_BYTES and in one segment file, and
        its entries in one ledger (max_entries_per_ledger).
        """
        datas, nmsgs, futs = self._datas, self._nmsgs, self._futs
        nbytes = self._bytes
        cap = min(MAX_GROUP_BYTES, self._config.max_segment_size)
        max_count = self._config.max_entries_per_ledger
        if nbytes + HEADER_SIZE * len(datas) <= cap and len(datas) <= max_count:
            self._datas, self._nmsgs, self._futs = [], [], []
            self._bytes = 0
            return datas, nmsgs, futs, nbytes
        taken = 0
        k = 0
        records = 0
        while k < len(datas) and k < max_count:
            size = len(datas[k]) + HEADER_SIZE
            if k and records + size > cap:
                break
            records += size
            taken += len(datas[k])
            k += 1
        self._datas, self._nmsgs, self._futs = datas[k:], nmsgs[k:], futs[k:]
        self._bytes = nbytes - taken
        return datas[:k], nmsgs[:k], futs[:k], taken

    def _finish(self, group: PendingGroup, refused: str | None) -> None:
        ml = self._ml
        futs = group.futs
        exc = group.error
        if exc is not None:
            metrics.WRITE_ERRORS.inc()
            ml.ctx.write_health.failed(f"append to {ml.name} failed: {exc}")
            fail_all(futs, StorageError(f"append to {ml.name} failed: {exc}"))
            if not exc.recovered:
                log.error("managed ledger fenced after a write error", ledger=ml.name)
                ml.fence()
                self.fail_queued(ManagedLedgerFenced(str(exc)))
            return
        if refused is not None:
            # Written, but maybe past a new owner's fence: never confirmed.
            log.error("managed ledger fenced: writes refused", ledger=ml.name, why=refused)
            ml.fence()
            fail_all(futs, ManagedLedgerFenced(refused))
            self.fail_queued(ManagedLedgerFenced(refused))
            return
        info = group.info
        datas, nmsgs = group.datas, group.nmsgs
        info.file.extend_index(group.ends, nmsgs)
        health = ml.ctx.write_health
        if health.failing:
            health.recovered()
        n = len(datas)
        first_id = group.first_id
        nbytes = group.nbytes
        if n == 1:
            # One entry (an unbatched send over many topics: a group per
            # message): no iterator machinery.
            last: Position = _new_tuple(Position, (info.ledger_id, first_id))
            positions = [last]
            if ml.has_active_cursors:
                info.cache.append([_new_tuple(Entry, (last, datas[0], nmsgs[0]))], nbytes)
        else:
            # Built by C-level map(): no per-entry Python frame on the hot path.
            positions = list(
                map(
                    _new_tuple,
                    repeat(Position, n),
                    zip(repeat(info.ledger_id, n), range(first_id, first_id + n), strict=True),
                )
            )
            last = positions[-1]
            if ml.has_active_cursors:
                entries: list[Entry] = list(
                    map(_new_tuple, repeat(Entry, n), zip(positions, datas, nmsgs, strict=True))
                )
                info.cache.append(entries, nbytes)
        stats = ml.stats
        stats.groups_written += 1
        stats.entries_written += n
        stats.bytes_written += nbytes
        stats.write_latency.observe(time.perf_counter() - group.queued_at)
        totals = metrics.TOTALS
        totals.groups += 1
        totals.entries += n
        totals.bytes += nbytes
        ml.entries_added(last, n, nbytes)
        try:
            list(map(_set_result, futs, positions))
        except asyncio.InvalidStateError:  # a caller cancelled its await
            for fut, pos in zip(futs, positions, strict=True):
                if not fut.done():
                    fut.set_result(pos)

    async def _roll_then_resume(self) -> None:
        try:
            await self._rollover()
        except Exception as exc:
            log.exception("rollover failed", ledger=self._ml.name)
            self.fail_queued(StorageError(f"append to {self._ml.name} failed: {exc}"))
        finally:
            self._rolling = None
            self.resume()

    async def _rollover(self) -> None:
        """Close the current ledger and start a new one (metadata first)."""
        ml = self._ml
        ctx = ml.ctx
        new_id = await ctx.allocate_ledger_id(ml.layout.current.ledger_id)
        lf = await ml.new_ledger_file(new_id)
        ctx.files.adopt(lf)
        old = ml.layout.current
        old.closed_at = ctx.clock()
        ml.layout.append(LedgerInfo(new_id, lf, ctx.cache.new_cache(new_id, ml.slowest_read)))
        try:
            await ml.write_ledger_list()
        except BaseException:
            ml.layout.remove(new_id)
            old.closed_at = None
            ctx.files.close(lf)
            await ml.discard_files([lf])
            raise
        self._ledger_since = ctx.clock()
        ml.stats.rollovers += 1
        metrics.ROLLOVERS.inc()
        ml.seal_later(old)
        log.debug("ledger rolled over", ledger=ml.name, closed=old.ledger_id, new=new_id)
        ml.schedule_trim()


def fail_all(futs: Sequence[asyncio.Future[Any]], exc: BaseException) -> None:
    for fut in futs:
        if not fut.done():
            fut.set_exception(exc)
