"""Durable cursor state: survives close/reopen exactly; persisted at most once per
interval; capped ranges come back unacked, never the reverse (SEM-5.2, SEM-3.9).
"""

from __future__ import annotations

import asyncio
import itertools
import json

import pytest

from magnetar.broker.storage import (
    BadVersion,
    FileManagedLedgerFactory,
    InitialPosition,
    ManagedCursor,
    Notification,
    NotificationType,
    Position,
    Stat,
    StorageError,
)
from magnetar.broker.storage.cursor import ManagedCursorImpl, cursor_path
from magnetar.broker.storage.ledger import ManagedLedgerImpl
from magnetar.broker.storage.paths import ledger_meta_path
from tests.unit.storage.storage_support import OpenFactory

NAME = "public/default/persistent/p"
CURSOR_PATH = cursor_path(ledger_meta_path(NAME), "s")


def _state(c: ManagedCursor, positions: list[Position]) -> tuple[object, ...]:
    return (
        c.mark_delete_position,
        [c.is_deleted(p) for p in positions],
        [c.get_batch_ack_set(p) for p in positions],
        dict(c.properties),
        c.backlog_entries,
        c.backlog_messages,
    )


async def test_state_survives_close_and_reopen_exactly(open_factory: OpenFactory) -> None:
    """SEM-5.2: mark-delete, ranges, bitsets and properties survive a restart."""
    f = await open_factory()
    ml = await f.open_impl(NAME)
    c = await ml.open_cursor("s", InitialPosition.EARLIEST, properties={"init": 1})
    p = [await ml.add_entry(b"%d" % i, num_messages=3) for i in range(30)]
    c.mark_delete(p[4], {"a": 1, "b": -5})
    c.delete([p[6], p[7], p[10], p[20], p[29]])
    c.delete_batch_indexes(p[12], [0b101])
    c.delete_batch_indexes(p[15], [-1, 3])
    before = _state(c, p)
    await f.close()

    f = await open_factory()
    ml = await f.open_impl(NAME)
    restored = ml.get_cursor("s")
    assert restored is not None
    assert _state(restored, p) == before
    # The read position after recovery is the first unacked one.
    assert restored.read_position == p[5]
    got = await restored.read_entries(5)
    assert [e.position for e in got] == [p[5], p[8], p[9], p[11], p[12]]


async def _cursor_with_entries(
    open_factory: OpenFactory, entries: int
) -> tuple[FileManagedLedgerFactory, ManagedCursor, list[Position], list[float]]:
    """A cursor over `entries` new entries, persisting every 0.2 s, and the
    loop times at which its state is written to the store."""
    f = await open_factory(cursor_persist_interval_s=0.2)
    ml = await f.open_impl(NAME)
    c = await ml.open_cursor("s", InitialPosition.EARLIEST)
    p = [await ml.add_entry(b"x") for _ in range(entries)]
    writes: list[float] = []
    loop = asyncio.get_running_loop()

    def heard(n: Notification) -> None:
        if n.path == CURSOR_PATH and n.type is NotificationType.MODIFIED:
            writes.append(loop.time())

    f.store.register_listener(heard)
    return f, c, p, writes


async def test_persists_at_most_once_per_interval(open_factory: OpenFactory) -> None:
    f, c, p, writes = await _cursor_with_entries(open_factory, 50)
    loop = asyncio.get_running_loop()
    start = loop.time()
    for pos in p:
        c.delete([pos])
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.25)
    elapsed = loop.time() - start
    assert 1 <= len(writes) <= elapsed / 0.2 + 1
    assert all(b - a >= 0.19 for a, b in itertools.pairwise(writes))
    got = await f.store.get(CURSOR_PATH)
    assert got is not None and json.loads(got.value)["md"] == list(p[-1])


async def test_flush_persists_now(open_factory: OpenFactory) -> None:
    f = await open_factory(cursor_persist_interval_s=3600)
    ml = await f.open_impl(NAME)
    c = await ml.open_cursor("s", InitialPosition.EARLIEST)
    p = await ml.add_entry(b"x")
    c.mark_delete(p)
    assert ml.durable_mark_deletes["s"] < p  # not persisted yet
    await c.flush()
    assert ml.durable_mark_deletes["s"] == p
    got = await f.store.get(cursor_path(ml.meta_path, "s"))
    assert got is not None and json.loads(got.value)["md"] == list(p)


async def test_capped_ranges_come_back_unacked(open_factory: OpenFactory) -> None:
    """Over the cap, later gaps are treated as unacked on recovery, never as acked."""
    f = await open_factory(max_persisted_unacked_ranges=3)
    ml = await f.open_impl(NAME)
    c = await ml.open_cursor("s", InitialPosition.EARLIEST)
    p = [await ml.add_entry(b"%d" % i) for i in range(20)]
    acked = [p[1], p[3], p[5], p[7], p[9], p[11]]
    c.delete(acked)
    for i in (13, 15, 17, 19):
        c.delete_batch_indexes(p[i], [0b10])
    await f.close()
    f = await open_factory(max_persisted_unacked_ranges=3)
    ml = await f.open_impl(NAME)
    restored = ml.get_cursor("s")
    assert restored is not None
    kept = [q for q in p if restored.is_deleted(q)]
    assert kept == [p[1], p[3], p[5]]
    assert set(kept) <= set(acked)  # nothing unacked ever comes back acked
    bitsets = [restored.get_batch_ack_set(p[i]) for i in (13, 15, 17, 19)]
    assert bitsets == [[0b10], [0b10], [0b10], None]


async def test_recovery_merges_gaps_closed_by_the_new_layout(open_factory: OpenFactory) -> None:
    """A range ending at the last entry of the ledger being written, and mark-delete
    right before it: after reopen (rollover) the cursor state is still consistent."""
    f = await open_factory()
    ml = await f.open_impl(NAME)
    c = await ml.open_cursor("s", InitialPosition.EARLIEST)
    p = [await ml.add_entry(b"%d" % i) for i in range(5)]
    c.delete([p[2], p[3], p[4]])
    await f.close()
    f = await open_factory()
    ml = await f.open_impl(NAME)
    restored = ml.get_cursor("s")
    assert restored is not None
    new = await ml.add_entry(b"n")
    assert [e.position for e in await restored.read_entries(10)] == [p[0], p[1], new]
    restored.delete([p[0], p[1]])
    assert restored.mark_delete_position == p[4]
    assert restored.backlog_entries == 1


async def test_closed_durable_cursor_still_holds_back_trimming(open_factory: OpenFactory) -> None:
    f = await open_factory(max_segment_size=1024)
    ml: ManagedLedgerImpl = await f.open_impl(NAME)
    c = await ml.open_cursor("s", InitialPosition.EARLIEST)
    for _ in range(10):
        await ml.add_entry(b"x" * 500)
    await c.close()
    assert ml.get_cursor("s") is None
    assert await ml.trim_consumed_ledgers() == 0
    again = await ml.open_cursor("s")
    assert isinstance(again, ManagedCursorImpl) and again is not c
    assert again.backlog_entries == 10


async def test_opening_the_same_cursor_concurrently(open_factory: OpenFactory) -> None:
    f = await open_factory()
    ml = await f.open_impl(NAME)
    a, b = await asyncio.gather(ml.open_cursor("s"), ml.open_cursor("s"))
    assert a is b


async def test_reopen_keeps_every_cursor(open_factory: OpenFactory) -> None:
    f: FileManagedLedgerFactory = await open_factory()
    ml = await f.open_impl(NAME)
    for name in ("a", "b", "c"):
        await ml.open_cursor(name)
    await f.close()
    f = await open_factory()
    ml = await f.open_impl(NAME)
    assert sorted(c.name for c in ml.cursors) == ["a", "b", "c"]


async def test_cursors_of_many_ledgers_persist_together(open_factory: OpenFactory) -> None:
    """Issue 24: cursors opened and acked at different moments persist on
    one grid of the interval shared by all, in the same loop turn, so the
    metadata store commits them together instead of each at its own phase."""
    f = await open_factory(cursor_persist_interval_s=0.5)
    loop = asyncio.get_running_loop()
    heard: dict[str, float] = {}
    paths: set[str] = set()

    def on_change(n: Notification) -> None:
        if n.path in paths and n.type is NotificationType.MODIFIED:
            heard.setdefault(n.path, loop.time())

    f.store.register_listener(on_change)
    for i in range(20):  # subscriptions made and acked over 0.4 s
        ml = await f.open_impl(f"public/default/persistent/many-{i}")
        c = await ml.open_cursor("s", InitialPosition.EARLIEST)
        paths.add(cursor_path(ml.meta_path, "s"))
        c.delete([await ml.add_entry(b"x")])
        await asyncio.sleep(0.02)
    await asyncio.sleep(1.2)
    assert set(heard) == paths
    times = sorted(heard.values())
    turns = 1 + sum(1 for a, b in itertools.pairwise(times) if b - a > 0.008)
    assert turns <= 3, times  # one per grid point crossed, not one per cursor


async def test_steady_acks_persist_once_every_interval(open_factory: OpenFactory) -> None:
    """SEM-3.9: under a steady stream of acks a cursor persists once per
    interval, not less often: an ack is at most about one interval from
    being durable (the grid must not push each write a whole interval on)."""
    _f, c, p, writes = await _cursor_with_entries(open_factory, 120)
    for pos in p:  # acks for 1.2 s
        c.delete([pos])
        await asyncio.sleep(0.01)
    gaps = [b - a for a, b in itertools.pairwise(writes)]
    assert len(writes) >= 4, writes
    assert max(gaps) < 0.3, gaps


async def test_a_write_applied_though_its_answer_was_lost(open_factory: OpenFactory) -> None:
    """SEM-5.2 across a metadata store timeout: a cursor write the store
    applied but never answered (etcd under a partition) leaves the node one
    version ahead; the cursor recognises its own bytes there and keeps
    persisting instead of failing on BadVersion from then on. Another
    writer's change is still refused."""
    f, c, p, _ = await _cursor_with_entries(open_factory, 5)
    store = f.store
    put = store.put
    lose_answer = True

    async def answer_lost_once(
        path: str, value: bytes, expected_version: int | None = None
    ) -> Stat:
        nonlocal lose_answer
        stat = await put(path, value, expected_version)
        if path == CURSOR_PATH and lose_answer:
            lose_answer = False
            raise StorageError("etcd request failed: Deadline Exceeded")
        return stat

    store.put = answer_lost_once  # type: ignore[method-assign]
    c.mark_delete(p[1])
    with pytest.raises(StorageError):
        await c.flush()
    c.mark_delete(p[3])
    await c.flush()  # finds the lost write applied, then writes on
    found = await store.get(CURSOR_PATH)
    assert found is not None
    assert json.loads(found.value)["md"] == [p[3].ledger_id, p[3].entry_id]
    # Someone else's write is not taken for ours.
    await put(CURSOR_PATH, b"{}", found.stat.version)
    c.mark_delete(p[4])
    with pytest.raises(BadVersion):
        await c.flush()
