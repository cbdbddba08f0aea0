"""Issue 48: a journal round of one small entry is written on the event loop
(one write and one fdatasync, no hop to the I/O thread); rounds of many
entries keep the thread, and a slow inline round sends the next ones back
to it. Every receipt still means the entry is on disk (SEM-5.1): the entries
are read back after a restart."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from magnetar.broker.storage import (
    EARLIEST,
    FileManagedLedgerFactory,
    ManagedLedgerConfig,
    SyncPolicy,
    journal,
    metrics,
)

NAME = "public/default/persistent/inline"


_REGISTRY = CollectorRegistry()
metrics.register(_REGISTRY)


def _inline_rounds() -> float:
    return _REGISTRY.get_sample_value("magnetar_storage_inline_rounds_total") or 0.0


async def _reopened(tmp_path: Path, config: ManagedLedgerConfig) -> list[bytes]:
    f = await FileManagedLedgerFactory.create(str(tmp_path), config)
    try:
        ml = await f.open_impl(NAME)
        return [e.data for e in await ml.read_entries(EARLIEST, 1000, 1 << 30)]
    finally:
        await f.close()


@pytest.mark.parametrize("policy", [SyncPolicy.FSYNC, SyncPolicy.NONE])
async def test_lone_appends_are_written_inline(tmp_path: Path, policy: SyncPolicy) -> None:
    config = ManagedLedgerConfig(sync_policy=policy)
    f = await FileManagedLedgerFactory.create(str(tmp_path), config)
    try:
        ml = await f.open_impl(NAME)
        await ml.add_entry(b"first")  # the ledger's file is made in the background
        before = _inline_rounds()
        for i in range(20):
            await ml.add_entry(b"lone-%d" % i)
        assert _inline_rounds() - before == 20
    finally:
        await f.close()
    assert await _reopened(tmp_path, config) == [b"first"] + [b"lone-%d" % i for i in range(20)]


async def test_a_round_of_many_entries_under_fsync_keeps_the_thread(tmp_path: Path) -> None:
    config = ManagedLedgerConfig(sync_policy=SyncPolicy.FSYNC)
    f = await FileManagedLedgerFactory.create(str(tmp_path), config)
    try:
        ml = await f.open_impl(NAME)
        await ml.add_entry(b"first")
        before = _inline_rounds()
        # Appended in one loop turn: they share a round.
        await asyncio.gather(*(ml.add_entry(b"many-%d" % i) for i in range(50)))
        assert _inline_rounds() == before
    finally:
        await f.close()
    assert len(await _reopened(tmp_path, config)) == 51


async def test_a_slow_inline_round_sends_the_next_ones_to_the_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = ManagedLedgerConfig(sync_policy=SyncPolicy.FSYNC)
    f = await FileManagedLedgerFactory.create(str(tmp_path), config)
    try:
        ml = await f.open_impl(NAME)
        await ml.add_entry(b"first")
        monkeypatch.setattr(journal, "INLINE_SLOW_S", 0.0)  # every inline round is slow
        before = _inline_rounds()
        for i in range(10):
            await ml.add_entry(b"after-%d" % i)
        assert _inline_rounds() - before == 1  # the first; the rest within the pause
    finally:
        await f.close()
    assert len(await _reopened(tmp_path, config)) == 11
