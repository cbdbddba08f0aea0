"""The write guard of a shared data directory (cluster mode): once it names
a reason, written entries are never confirmed, and the ledger refuses more;
two factories can share one directory when it is not locked."""

from __future__ import annotations

from pathlib import Path

import pytest

from magnetar.broker.storage import FileManagedLedgerFactory, ManagedLedgerConfig
from magnetar.broker.storage.api import ManagedLedgerFenced, StorageError
from magnetar.broker.storage.metadata import SqliteMetadataStore


async def test_a_refusing_guard_fails_the_write_and_fences_the_ledger(tmp_path: Path) -> None:
    refusal: list[str] = []
    factory = await FileManagedLedgerFactory.create(
        str(tmp_path), ManagedLedgerConfig(), write_guard=lambda: refusal[0] if refusal else None
    )
    try:
        ml = await factory.open("t/ns/persistent/a")
        first = await ml.add_entry(b"confirmed")
        refusal.append("session lost")
        pending = ml.add_entry(b"never confirmed")
        with pytest.raises(ManagedLedgerFenced, match="session lost"):
            await pending
        # Nothing past the last confirmed entry is published to readers...
        assert ml.last_confirmed_position == first
        assert ml.number_of_entries == 1
        # ...and later appends are refused at once.
        with pytest.raises(ManagedLedgerFenced):
            ml.add_entry(b"later")
    finally:
        await factory.close()


async def test_shared_directories_are_not_locked(tmp_path: Path) -> None:
    store = await SqliteMetadataStore.open(str(tmp_path / "m.db"))
    try:
        one = await FileManagedLedgerFactory.create(str(tmp_path), store=store, shared=True)
        two = await FileManagedLedgerFactory.create(str(tmp_path), store=store, shared=True)
        await one.close()
        await two.close()
        locked = await FileManagedLedgerFactory.create(str(tmp_path), store=store)
        with pytest.raises(StorageError, match="in use"):
            await FileManagedLedgerFactory.create(str(tmp_path), store=store)
        await locked.close()
    finally:
        await store.close()
