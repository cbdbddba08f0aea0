"""ManagedCursorImpl: read position, acks (ranges, batch-index sets), persistence.

All state changes happen in memory at once; a durable cursor persists a
snapshot to the metadata store at most once per ``cursor_persist_interval_s``
(a timer armed by the first change after a persist), on ``flush`` and on
``close``. The ledger trims by the *persisted* mark-delete only.
"""

from __future__ import annotations

import asyncio
import bisect
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from typing import Any
from urllib.parse import quote

import structlog

from magnetar.broker.storage.api import (
    EARLIEST,
    LATEST,
    BadVersion,
    ConcurrentReadError,
    CursorClosed,
    Entry,
    EntryPredicate,
    InitialPosition,
    InvalidPosition,
    ManagedCursor,
    Position,
    Stat,
    StorageError,
)
from magnetar.broker.storage.context import OwningLedger
from magnetar.broker.storage.ranges import DeletedRanges, ack_set_to_int, int_to_ack_set

log = structlog.get_logger(__name__)


def cursor_path(ledger_meta_path: str, name: str) -> str:
    return f"{ledger_meta_path}/{quote(name, safe='')}"


class ManagedCursorImpl(ManagedCursor):
    def __init__(
        self,
        ml: OwningLedger,
        name: str,
        *,
        durable: bool,
        mark_delete: Position,
        properties: Mapping[str, int] | None = None,
    ) -> None:
        self._ml = ml
        self._layout = ml.layout
        self._name = name
        self._durable = durable
        self._md = mark_delete
        self._read = ml.layout.next_position(mark_delete)
        self._ranges = DeletedRanges(ml.layout)
        self._ack_sets: dict[Position, int] = {}
        self._props: dict[str, int] = dict(properties or {})
        self._closed = False
        self._active = False
        self._reading = False
        self._seek_gen = 0
        self._waiters: list[asyncio.Future[None]] = []
        # Persistence (durable only).
        self._loop = asyncio.get_running_loop()
        self._path = cursor_path(ml.meta_path, name)
        self._version = -1
        # What the puts since the last answered one wrote: a put whose answer
        # was lost (a metadata store timeout) may have been applied all the same.
        self._unanswered: list[bytes] = []
        self._dirty = False
        self._last_persist = float("-inf")
        self._persist_handle: asyncio.TimerHandle | None = None
        self._persist_task: asyncio.Task[None] | None = None
        self._persist_lock = asyncio.Lock()

    # ---------------------------------------------------------------------- opening

    @classmethod
    async def open_durable(
        cls,
        ml: OwningLedger,
        name: str,
        initial_position: InitialPosition,
        properties: Mapping[str, int] | None,
    ) -> ManagedCursorImpl:
        got = await ml.ctx.store.get(cursor_path(ml.meta_path, name))
        if got is not None:
            return cls.restore(ml, name, got.value, got.stat.version)
        if initial_position is InitialPosition.LATEST:
            md = ml.last_confirmed_position
        else:
            md = ml.previous_position(ml.first_position)
        cursor = cls(ml, name, durable=True, mark_delete=md, properties=properties)
        cursor._dirty = True
        await cursor._persist()
        return cursor

    @classmethod
    def restore(cls, ml: OwningLedger, name: str, data: bytes, version: int) -> ManagedCursorImpl:
        """A durable cursor from its stored record (read position = after mark-delete)."""
        body = json.loads(data)
        md = Position(*body["md"])
        cursor = cls(ml, name, durable=True, mark_delete=md, properties=body.get("props"))
        cursor._version = version
        for lf, ef, lt, et in body.get("ranges", []):
            start, end = Position(lf, ef), Position(lt, et)
            if end > md:
                cursor._ranges.add_range(max(start, ml.layout.next_position(md)), end)
        cursor._ranges.merge_adjacent()
        for lid, eid, bits in body.get("ack_sets", []):
            pos = Position(lid, eid)
            if pos > md and not cursor._ranges.contains(pos):
                cursor._ack_sets[pos] = int(bits, 16)
        ml.durable_mark_deletes[name] = md
        cursor._advance_mark_delete()
        cursor._read = ml.layout.next_position(cursor._md)
        return cursor

    def _encode(self) -> bytes:
        limit = self._ml.config.max_persisted_unacked_ranges
        ranges = [[s[0], s[1], e[0], e[1]] for s, e in self._ranges.ranges_list(limit)]
        acks = sorted(self._ack_sets.items())[:limit]
        body: dict[str, Any] = {
            "md": [self._md[0], self._md[1]],
            "props": self._props,
            "ranges": ranges,
            "ack_sets": [[p[0], p[1], format(bits, "x")] for p, bits in acks],
        }
        return json.dumps(body, separators=(",", ":")).encode()

    # -------------------------------------------------------------------- accessors

    @property
    def name(self) -> str:
        return self._name

    @property
    def is_durable(self) -> bool:
        return self._durable

    @property
    def is_active(self) -> bool:
        return self._active

    def set_active(self) -> None:
        if not self._active and not self._closed:
            self._active = True
            self._ml.cursor_activity(self, True)

    def set_inactive(self) -> None:
        if self._active:
            self._active = False
            self._ml.cursor_activity(self, False)

    @property
    def read_position(self) -> Position:
        return self._read

    @property
    def mark_delete_position(self) -> Position:
        return self._md

    @property
    def properties(self) -> Mapping[str, int]:
        return dict(self._props)

    @property
    def backlog_entries(self) -> int:
        layout = self._layout
        total = layout.count_entries(
            layout.next_position(self._md), self._ml.last_confirmed_position
        )
        return max(0, total - self._ranges.entries)

    @property
    def backlog_messages(self) -> int:
        layout = self._layout
        total = layout.count_messages(
            layout.next_position(self._md), self._ml.last_confirmed_position
        )
        return max(0, total - self._ranges.messages)

    def _check_open(self) -> None:
        if self._closed:
            raise CursorClosed(f"cursor {self._name} of {self._ml.name} is closed")
        self._ml.check_open()

    # ------------------------------------------------------------------------ reads

    def _skip_deleted(self, pos: Position) -> Position:
        layout = self._layout
        pos = layout.normalize(pos)
        if pos <= self._md:
            pos = layout.normalize(layout.next_position(self._md))
        while True:
            rng = self._ranges.range_at_or_after(pos)
            if rng is None or rng[0] > pos:
                return pos
            pos = layout.normalize(layout.next_position(rng[1]))

    def has_more_entries(self) -> bool:
        lac = self._ml.last_confirmed_position
        return lac[1] >= 0 and self._layout.normalize(self._read) <= lac

    async def read_entries(self, max_entries: int, max_bytes: int = 5 * 1024 * 1024) -> list[Entry]:
        self._check_open()
        if self._reading:
            raise ConcurrentReadError(f"cursor {self._name} already has a read in flight")
        self._reading = True
        try:
            return await self._read_some(max_entries, max_bytes)
        finally:
            self._reading = False

    async def _read_some(self, max_entries: int, max_bytes: int) -> list[Entry]:
        ml, layout = self._ml, self._layout
        gen = self._seek_gen
        out: list[Entry] = []
        budget = max_bytes
        pos = self._read
        while len(out) < max_entries and budget > 0:
            pos = self._skip_deleted(pos)
            info = layout.get(pos.ledger_id)
            if info is None:
                break
            count = info.entry_count
            if pos.entry_id >= count:
                if info is layout.current:
                    break
                pos = Position(pos.ledger_id, count)
                continue
            n = min(max_entries - len(out), count - pos.entry_id)
            nxt = self._ranges.range_at_or_after(pos)
            if nxt is not None and nxt[0].ledger_id == pos.ledger_id:
                n = min(n, nxt[0].entry_id - pos.entry_id)
            got, nbytes = await ml.read_in_ledger(info, pos.entry_id, n, budget, not out)
            if not got:
                break
            out.extend(got)
            budget -= nbytes
            pos = layout.next_position(got[-1].position)
        if gen == self._seek_gen and not self._closed:
            self._read = self._skip_deleted(pos)
        return out

    async def read_entries_or_wait(
        self, max_entries: int, max_bytes: int = 5 * 1024 * 1024
    ) -> list[Entry]:
        while True:
            entries = await self.read_entries(max_entries, max_bytes)
            if entries:
                return entries
            fut: asyncio.Future[None] = self._loop.create_future()
            self._waiters.append(fut)
            try:
                await self._ml.wait_for_entries_after(self._ml.last_confirmed_position, fut)
            finally:
                if fut in self._waiters:
                    self._waiters.remove(fut)
            self._check_open()

    # ------------------------------------------------------------------------- acks

    def mark_delete(self, position: Position, properties: Mapping[str, int] | None = None) -> None:
        self._check_open()
        position = Position(*position)
        if position < self._md:
            return
        if position > self._ml.last_confirmed_position:
            raise InvalidPosition(
                f"mark-delete {position} is after the last entry "
                f"{self._ml.last_confirmed_position} of {self._ml.name}"
            )
        if properties is not None:
            self._props = dict(properties)
        if position > self._md:
            self._set_mark_delete(position)
        self._mark_dirty()

    def _set_mark_delete(self, position: Position) -> None:
        self._md = position
        self._ranges.remove_up_to(position)
        if self._ack_sets:
            for p in [p for p in self._ack_sets if p <= position]:
                del self._ack_sets[p]
        self._advance_mark_delete()

    def _advance_mark_delete(self) -> None:
        """SEM-3.1: move mark-delete over the deleted range that starts right after it."""
        ranges = self._ranges
        while True:
            first = ranges.first()
            if first is None or first[0] != self._layout.next_position(self._md):
                break
            ranges.pop_first()
            self._md = first[1]
            if self._ack_sets:
                for p in [p for p in self._ack_sets if p <= self._md]:
                    del self._ack_sets[p]
        if self._read <= self._md:
            self._read = self._layout.next_position(self._md)

    def delete(self, positions: Iterable[Position]) -> None:
        self._check_open()
        md = self._md
        layout = self._layout
        ranges = self._ranges
        if (
            not ranges
            and type(positions) is list
            and len(positions) > 1
            and self._delete_run(positions)
        ):
            return
        changed = False
        for p in positions:
            if p <= md or not layout.exists(p):
                continue
            if not ranges and p == layout.next_position(md):
                # In-order ack right after mark-delete: no range to keep.
                md = self._md = Position(*p)
                changed = True
                if self._ack_sets:
                    self._ack_sets.pop(p, None)
            elif ranges.add(Position(*p)):
                changed = True
                self._ack_sets.pop(p, None)
        if changed:
            self._advance_mark_delete()
            self._mark_dirty()

    def _delete_run(self, positions: list[Position]) -> bool:
        """delete() of consecutive entries of one ledger starting right after
        mark-delete (a replicator's receipts or skipped entries, an in-order
        burst of acks): mark-delete moves to the last in one step. False when
        `positions` is not such a run."""
        layout = self._layout
        first, last = positions[0], positions[-1]
        ledger_id, entry_id = first
        count = len(positions)
        if (
            first != layout.next_position(self._md)
            or last != (ledger_id, entry_id + count - 1)
            or not layout.exists(last)
            or [p[1] for p in positions] != list(range(entry_id, entry_id + count))
            or [p[0] for p in positions].count(ledger_id) != count
        ):
            return False
        self._md = Position(ledger_id, entry_id + count - 1)
        if self._ack_sets:
            for p in positions:
                self._ack_sets.pop(p, None)
        self._advance_mark_delete()
        self._mark_dirty()
        return True

    def delete_batch_indexes(self, position: Position, ack_set: Sequence[int]) -> None:
        self._check_open()
        position = Position(*position)
        if self.is_deleted(position) or not self._layout.exists(position):
            return
        bits = ack_set_to_int(ack_set)
        old = self._ack_sets.get(position)
        if old is not None:
            bits &= old
        if bits == 0:
            self.delete([position])
            return
        if bits != old:
            self._ack_sets[position] = bits
            self._mark_dirty()

    def is_deleted(self, position: Position) -> bool:
        return position <= self._md or self._ranges.contains(position)

    def get_batch_ack_set(self, position: Position) -> list[int] | None:
        bits = self._ack_sets.get(position)
        return None if bits is None else int_to_ack_set(bits)

    # -------------------------------------------------------------------- positions

    def rewind(self) -> None:
        self._check_open()
        self._read = self._layout.next_position(self._md)
        self._seek_gen += 1

    def seek(self, position: Position) -> None:
        self._check_open()
        position = Position(*position)
        self._read = self._layout.next_position(self._md) if position <= self._md else position
        self._seek_gen += 1

    async def reset_cursor(self, position: Position) -> None:
        self._check_open()
        ml = self._ml
        if position == EARLIEST:
            target = ml.first_position
        elif position == LATEST:
            target = ml.next_position(ml.last_confirmed_position)
        else:
            target = min(
                self._layout.normalize(Position(*position)),
                ml.next_position(ml.last_confirmed_position),
            )
            target = max(target, ml.first_position)
        self._md = ml.previous_position(target)
        self._ranges.clear()
        self._ack_sets.clear()
        self._read = target
        self._seek_gen += 1
        self._mark_dirty()
        await self.flush()

    async def find_newest_matching(
        self, predicate: EntryPredicate, *, from_first_entry: bool = False
    ) -> Position | None:
        self._check_open()
        ml, layout = self._ml, self._layout
        lac = ml.last_confirmed_position
        start = (
            ml.first_position
            if from_first_entry
            else layout.normalize(layout.next_position(self._md))
        )
        if lac[1] < 0 or start > lac:
            return None
        spans = layout.positions_between(start, lac)
        starts: list[int] = []
        total = 0
        for _lid, lo, hi in spans:
            starts.append(total)
            total += hi - lo + 1
        lo_i, hi_i = 0, total - 1
        found: Position | None = None
        while lo_i <= hi_i:
            mid = (lo_i + hi_i) // 2
            k = bisect.bisect_right(starts, mid) - 1
            lid, first, _last = spans[k]
            pos = Position(lid, first + mid - starts[k])
            got = await ml.read_positions([pos])
            if not got:
                raise StorageError(f"{pos} vanished during the search (trimmed?)")
            if predicate(got[0]):
                found = pos
                lo_i = mid + 1
            else:
                hi_i = mid - 1
        return found

    # ------------------------------------------------------------------ persistence

    def _mark_dirty(self) -> None:
        if not self._durable or self._closed:
            return
        self._dirty = True
        if self._persist_handle is not None or self._persist_task is not None:
            return
        interval = self._ml.config.cursor_persist_interval_s
        now = self._loop.time()
        due = max(now, self._last_persist + interval)
        if interval > 0:
            # On a grid shared by every cursor: the cursors of many topics
            # dirty within one interval persist in the same loop turn, so
            # the metadata store commits them in one transaction. (The
            # epsilon keeps a due time on a grid point there, not one later.)
            due = math.ceil(due / interval - 1e-6) * interval
        self._persist_handle = self._loop.call_at(due, partial(self._on_persist_timer, due))

    def _on_persist_timer(self, due: float) -> None:
        self._persist_handle = None
        if self._closed:
            return
        self._persist_task = self._loop.create_task(self._persist_in_background(due))

    async def _persist_in_background(self, due: float) -> None:
        try:
            # Counted from the grid point, not from when the write ended:
            # otherwise the next point is two intervals away.
            await self._persist(started=due)
        except StorageError:
            log.exception("cursor persist failed", ledger=self._ml.name, cursor=self._name)
        finally:
            self._persist_task = None
        if self._dirty:
            self._mark_dirty()

    async def _persist(self, started: float | None = None) -> None:
        async with self._persist_lock:
            if not self._dirty:
                return
            self._dirty = False
            md = self._md
            data = self._encode()
            try:
                stat = await self._put(data)
            except BaseException:
                self._dirty = True
                raise
            self._version = stat.version
            self._last_persist = self._loop.time() if started is None else started
            self._ml.cursor_persisted(self._name, md)

    async def _put(self, data: bytes) -> Stat:
        """Compare-and-set of the cursor's node. When the version moved and
        the node holds what one of our unanswered puts wrote, that put was
        applied: go on from its version (once). Any other writer's change
        stays a BadVersion (the cursor is someone else's now)."""
        store = self._ml.ctx.store
        try:
            stat = await store.put(self._path, data, self._version)
        except BadVersion:
            found = await store.get(self._path)
            if found is None or found.value not in self._unanswered:
                raise
            log.info("cursor write found applied after its answer was lost",
                     ledger=self._ml.name, cursor=self._name)  # fmt: skip
            self._version = found.stat.version
            self._unanswered.clear()
            return await self._put(data)
        except StorageError:
            self._unanswered = [*self._unanswered[-7:], data]
            raise
        self._unanswered.clear()
        return stat

    async def flush(self) -> None:
        if not self._durable:
            return
        if self._persist_handle is not None:
            self._persist_handle.cancel()
            self._persist_handle = None
        await self._persist()

    def _stop(self) -> None:
        self._closed = True
        self.set_inactive()
        if self._persist_handle is not None:
            self._persist_handle.cancel()
            self._persist_handle = None
        err = CursorClosed(f"cursor {self._name} of {self._ml.name} is closed")
        for fut in self._waiters:
            if not fut.done():
                fut.set_exception(err)
        self._waiters.clear()

    async def close(self) -> None:
        if self._closed:
            return
        self._stop()
        try:
            if self._persist_task is not None:
                await asyncio.wait([self._persist_task])
            if self._durable:
                await self._persist()
        finally:
            self._ml.cursor_detached(self)

    async def discard(self) -> None:
        """Close without persisting (the cursor is being deleted)."""
        self._stop()
        if self._persist_task is not None:
            self._persist_task.cancel()
            await asyncio.wait([self._persist_task])
        self._ml.cursor_detached(self)
