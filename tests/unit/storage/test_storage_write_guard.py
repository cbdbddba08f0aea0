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


async def test_a_new_owner_fences_the_old_owners_ledger(tmp_path: Path) -> None:
    """The second opener records the first one's ledger as closed at its last
    complete entry and writes a ledger of its own; what the first one writes
    afterwards lies beyond that fence and is never read."""
    store = await SqliteMetadataStore.open(str(tmp_path / "m.db"))
    old = await FileManagedLedgerFactory.create(str(tmp_path), store=store, shared=True)
    new = await FileManagedLedgerFactory.create(str(tmp_path), store=store, shared=True)
    try:
        name = "t/ns/persistent/moved"
        keep = ManagedLedgerConfig(retention_time_s=-1, retention_size_bytes=-1)
        old_ml = await old.open(name, keep)
        written = [await old_ml.add_entry(f"old-{i}".encode()) for i in range(3)]
        new_ml = await new.open(name, keep)
        assert new_ml.last_confirmed_position == written[-1]
        # The old owner, cut off but unguarded here, writes past the fence...
        await old_ml.add_entry(b"beyond the fence")
        own = await new_ml.add_entry(b"new-0")
        assert own[0] > written[-1][0]  # a ledger of the new owner's own
        got = await new_ml.read_entries(written[0], 10)
        # ...and the new owner never serves it.
        assert [e.data for e in got] == [b"old-0", b"old-1", b"old-2", b"new-0"]
    finally:
        await new.close()
        await old.close()
        await store.close()
