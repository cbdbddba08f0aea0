"""Time-based deduplication snapshots (deduplicationSnapshotInterval, Pulsar's
takeSnapshot on a timer): with the entry interval out of reach, a snapshot is
taken once the interval has passed since the last one and something was
persisted since; the timer lives while deduplication is on."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from magnetar.broker.features.dedup import CURSOR_NAME, MessageDeduplication
from magnetar.broker.storage import FileManagedLedgerFactory
from magnetar.broker.storage.api import ManagedLedger, ManagedLedgerConfig, SyncPolicy


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def ledger(tmp_path: Path) -> AsyncIterator[ManagedLedger]:
    factory = await FileManagedLedgerFactory.create(
        str(tmp_path), ManagedLedgerConfig(sync_policy=SyncPolicy.NONE)
    )
    try:
        yield await factory.open("public/default/persistent/dedup-time")
    finally:
        await factory.close()


async def _persist(dedup: MessageDeduplication, ledger: ManagedLedger, seq: int) -> None:
    """One SEND of producer "p" accepted and stored (the payload is never
    parsed here: replay is not part of these tests)."""
    dedup.check("p", seq, seq)
    position = await ledger.add_entry(b"entry %d" % seq)
    dedup.persisted_entry("p", seq, position)


def _snapshot(ledger: ManagedLedger) -> dict[str, int]:
    cursor = next(c for c in ledger.cursors if c.name == CURSOR_NAME)
    return dict(cursor.properties)


async def test_snapshot_when_due_and_only_when_something_changed(ledger: ManagedLedger) -> None:
    clock = Clock()
    dedup = MessageDeduplication("t", ledger, snapshot_interval=100_000, clock=clock)
    await dedup.enable()
    dedup.set_snapshot_interval_seconds(5)
    await _persist(dedup, ledger, 0)
    clock.now += 4.9
    assert not dedup.snapshot_if_due()
    assert _snapshot(ledger) == {}
    clock.now += 0.1
    assert dedup.snapshot_if_due()
    assert _snapshot(ledger) == {"p": 0}
    clock.now += 10
    assert not dedup.snapshot_if_due()  # nothing persisted since
    await _persist(dedup, ledger, 1)
    assert dedup.snapshot_if_due()  # due since long: taken at once
    assert _snapshot(ledger) == {"p": 1}
    await _persist(dedup, ledger, 2)
    clock.now += 1
    assert not dedup.snapshot_if_due()  # 1 s after the last one
    dedup.set_snapshot_interval_seconds(0)
    clock.now += 100
    assert not dedup.snapshot_if_due()  # off: entry count alone
    dedup.close()


async def test_an_entry_count_snapshot_restarts_the_interval(ledger: ManagedLedger) -> None:
    clock = Clock()
    dedup = MessageDeduplication("t", ledger, snapshot_interval=2, clock=clock)
    await dedup.enable()
    dedup.set_snapshot_interval_seconds(5)
    clock.now += 4
    await _persist(dedup, ledger, 0)
    await _persist(dedup, ledger, 1)  # the second entry: a snapshot by count
    assert _snapshot(ledger) == {"p": 1}
    await _persist(dedup, ledger, 2)
    clock.now += 4  # 8 s since enable, 4 since the last snapshot
    assert not dedup.snapshot_if_due()
    clock.now += 1
    assert dedup.snapshot_if_due()
    assert _snapshot(ledger) == {"p": 2}
    dedup.close()


async def test_the_timer_takes_it_and_stops_with_close_or_disable(ledger: ManagedLedger) -> None:
    dedup = MessageDeduplication("t", ledger, snapshot_interval=100_000)
    dedup.set_snapshot_interval_seconds(0.05)  # before enable: armed by enable
    await dedup.enable()
    await _persist(dedup, ledger, 7)
    for _ in range(100):
        if _snapshot(ledger):
            break
        await asyncio.sleep(0.02)
    assert _snapshot(ledger) == {"p": 7}
    dedup.close()
    assert dedup._timer is None
    await dedup.disable()
    assert dedup._timer is None
    await dedup.enable()
    assert dedup._timer is not None
    await dedup.disable()
    assert dedup._timer is None
