"""Trimming and retention: whole ledgers go once every durable cursor is past them
and retention allows (SEM-5.4).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from magnetar.broker.storage import (
    EARLIEST,
    FileManagedLedgerFactory,
    InitialPosition,
    ManagedLedgerConfig,
    Position,
)
from magnetar.broker.storage.ledger import ManagedLedgerImpl
from tests.unit.storage.storage_support import Clock, OpenFactory

NAME = "public/default/persistent/trim"
SEG = 2048


async def _fill(ml: ManagedLedgerImpl, n: int) -> list[Position]:
    return [await ml.add_entry(bytes([i % 256]) * 700) for i in range(n)]


def _files(ml: ManagedLedgerImpl) -> list[str]:
    return sorted(os.listdir(ml.dir))


async def test_ledgers_go_once_every_durable_cursor_is_past_them(
    open_factory: OpenFactory,
) -> None:
    f = await open_factory(max_segment_size=SEG)
    ml = await f.open_impl(NAME)
    a = await ml.open_cursor("a", InitialPosition.EARLIEST)
    b = await ml.open_cursor("b", InitialPosition.EARLIEST)
    p = await _fill(ml, 12)
    ledgers = sorted({q.ledger_id for q in p})
    assert len(ledgers) >= 3
    last_of_first = max(q for q in p if q.ledger_id == ledgers[0])
    a.mark_delete(p[-1])
    await a.flush()
    assert await ml.trim_consumed_ledgers() == 0  # b still needs everything
    b.mark_delete(last_of_first)
    await b.flush()
    assert await ml.trim_consumed_ledgers() == 1
    assert ml.layout.ids[0] == ledgers[1]
    assert f"{ledgers[0]}.log" not in _files(ml)
    assert ml.first_position == Position(ledgers[1], 0)
    # Reads from a trimmed position start at the first stored entry.
    got = await ml.read_entries(p[0], 1)
    assert got[0].position == Position(ledgers[1], 0)
    assert ml.number_of_entries == len([q for q in p if q.ledger_id != ledgers[0]])


async def test_trim_follows_the_persisted_mark_delete_only(open_factory: OpenFactory) -> None:
    """A crash must never find its cursor's unacked entries trimmed."""
    f = await open_factory(max_segment_size=SEG, cursor_persist_interval_s=3600)
    ml = await f.open_impl(NAME)
    c = await ml.open_cursor("a", InitialPosition.EARLIEST)
    p = await _fill(ml, 12)
    c.mark_delete(p[-1])
    assert await ml.trim_consumed_ledgers() == 0
    await c.flush()
    assert await ml.trim_consumed_ledgers() >= 2


async def test_trim_runs_by_itself_after_acks(open_factory: OpenFactory) -> None:
    f = await open_factory(max_segment_size=SEG, cursor_persist_interval_s=0)
    ml = await f.open_impl(NAME)
    c = await ml.open_cursor("a", InitialPosition.EARLIEST)
    p = await _fill(ml, 12)
    c.delete(p)
    for _ in range(50):
        if len(ml.layout) == 1:
            break
        await _settle()
    assert len(ml.layout) == 1
    assert c.backlog_entries == 0


async def test_trim_runs_when_acks_finish_a_ledger_in_place(open_factory: OpenFactory) -> None:
    """Acks that reach the last entry of a closed ledger without moving to
    another ledger schedule a trim too (not only the periodic sweep)."""
    f = await open_factory(max_segment_size=SEG, cursor_persist_interval_s=0)
    ml = await f.open_impl(NAME)
    c = await ml.open_cursor("a", InitialPosition.EARLIEST)
    p = await _fill(ml, 12)
    first = p[0].ledger_id
    in_first = [q for q in p if q.ledger_id == first]
    c.delete(in_first[:-1])  # mark-delete moves inside the first ledger
    await _settle()
    assert ml.layout.ids[0] == first
    c.delete(in_first[-1:])  # ... to its last entry: the ledger can go
    for _ in range(50):
        if ml.layout.ids[0] != first:
            break
        await _settle()
    assert ml.layout.ids[0] != first


async def _settle() -> None:
    await asyncio.sleep(0.01)


async def test_without_durable_cursors_everything_closed_goes(open_factory: OpenFactory) -> None:
    f = await open_factory(max_segment_size=SEG)
    ml = await f.open_impl(NAME)
    reader = ml.new_non_durable_cursor(EARLIEST)  # does not hold anything back
    await _fill(ml, 12)
    await ml.trim_consumed_ledgers()
    assert len(ml.layout) == 1
    got = await reader.read_entries(100)
    assert all(e.position.ledger_id == ml.layout.current.ledger_id for e in got)


async def test_retention_time(open_factory: OpenFactory, clock: Clock) -> None:
    f = await open_factory(max_segment_size=SEG, retention_time_s=60, retention_size_bytes=-1)
    ml = await f.open_impl(NAME)
    p = await _fill(ml, 12)
    assert await ml.trim_consumed_ledgers() == 0
    clock.now += 61
    assert await ml.trim_consumed_ledgers() >= 2
    assert ml.last_confirmed_position == p[-1]


async def test_retention_size(open_factory: OpenFactory) -> None:
    # Two 700-byte entries per 2 KiB ledger: 10500 bytes in 8 ledgers.
    f = await open_factory(max_segment_size=SEG, retention_time_s=-1, retention_size_bytes=5000)
    ml = await f.open_impl(NAME)
    await _fill(ml, 15)
    await ml.trim_consumed_ledgers()  # (it also runs by itself after each rollover)
    # The oldest went until the rest fits: 3 full ledgers and the current one.
    assert ml.total_size == 4900 and len(ml.layout) == 4


async def test_infinite_retention_keeps_everything(open_factory: OpenFactory) -> None:
    f = await open_factory(max_segment_size=SEG, retention_time_s=-1, retention_size_bytes=-1)
    ml = await f.open_impl(NAME)
    p = await _fill(ml, 12)
    assert await ml.trim_consumed_ledgers() == 0
    assert len(await ml.read_entries(p[0], 100)) == 12


async def test_trimmed_state_survives_reopen(open_factory: OpenFactory) -> None:
    f = await open_factory(max_segment_size=SEG)
    ml = await f.open_impl(NAME)
    c = await ml.open_cursor("a", InitialPosition.EARLIEST)
    p = await _fill(ml, 12)
    c.mark_delete(p[8])
    await c.flush()
    await ml.trim_consumed_ledgers()
    kept = list(ml.layout.ids)
    await f.close()
    f = await open_factory(max_segment_size=SEG)
    ml = await f.open_impl(NAME)
    assert ml.layout.ids[: len(kept)] == kept
    c2 = ml.get_cursor("a")
    assert c2 is not None and c2.backlog_entries == 3
    assert [e.position for e in await c2.read_entries(10)] == p[9:]


async def test_the_factory_sweeps_for_time_retention(tmp_path: Path, clock: Clock) -> None:
    """Without any activity, expired ledgers still go (the factory's periodic sweep)."""
    config = ManagedLedgerConfig(max_segment_size=SEG, retention_time_s=60, retention_size_bytes=-1)
    f = await FileManagedLedgerFactory.create(
        str(tmp_path), config, clock=clock, trim_interval_s=0.01
    )
    try:
        ml = await f.open_impl(NAME)
        await _fill(ml, 12)
        before = len(ml.layout)
        await asyncio.sleep(0.05)
        assert len(ml.layout) == before
        clock.now += 61
        for _ in range(100):
            if len(ml.layout) == 1:
                break
            await asyncio.sleep(0.01)
        assert len(ml.layout) == 1
    finally:
        await f.close()
