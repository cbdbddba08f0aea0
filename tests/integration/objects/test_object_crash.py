"""SIGKILL at random moments of rounds, sealing and collection on object
storage (issue 41): every append that resolved reads back, byte for byte, at
its position, after each kill and after a collection that takes every object
no extent names (nothing the index names is ever deleted)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from magnetar.broker.storage import InitialPosition, Position
from magnetar.broker.storage.metadata import SqliteMetadataStore
from magnetar.broker.storage.objects.collector import RoundCollector
from magnetar.broker.storage.objects.factory import ObjectManagedLedgerFactory
from magnetar.broker.storage.objects.store import ObjectStore, ObjectStoreConfig
from tests.integration.objects.crash_child import CONFIG, NAME, parse_seq, payload
from tests.integration.storage.crash_support import run_until_killed
from tests.support.seaweedfs import SeaweedServer

CHILD = str(Path(__file__).with_name("crash_child.py"))
ROUNDS = 5

pytestmark = pytest.mark.slow


async def test_sigkill_during_rounds_sealing_and_collection_loses_nothing(
    tmp_path: Path, seaweedfs: SeaweedServer, object_store_url: str
) -> None:
    rng = random.Random(20261126)
    data_dir = str(tmp_path / "broker")
    config = ObjectStoreConfig(object_store_url, endpoint=seaweedfs.endpoint)
    reported: dict[int, Position] = {}
    next_seq = 0
    collected = 0
    for _ in range(ROUNDS):
        lines = await run_until_killed(
            CHILD,
            [data_dir, object_store_url, seaweedfs.endpoint, str(next_seq)],
            1,
            rng.uniform(0.3, 2.5),
        )
        for line in lines:
            kind, *rest = line.split()
            if kind == "a":
                seq, lid, eid = map(int, rest)
                reported[seq] = Position(lid, eid)
                next_seq = max(next_seq, seq + 1)
        await _check(data_dir, config, reported)
        # Nobody writes now: collect with no grace, then everything must
        # still read (a named object deleted would fail the read).
        store = await SqliteMetadataStore.open(str(Path(data_dir) / "metadata.db"))
        try:
            collector = RoundCollector(ObjectStore(config), store, grace_s=0.0)
            collected += await collector.collect_once()
        finally:
            await store.close()
        await _check(data_dir, config, reported)
    assert len(reported) > 30, "too few appends to say anything"
    assert collected > 0, "nothing was ever garbage: the collection went untested"


async def _check(data_dir: str, config: ObjectStoreConfig, reported: dict[int, Position]) -> None:
    factory = await ObjectManagedLedgerFactory.open_on(
        config, data_dir, CONFIG, collect_interval_s=0
    )
    try:
        ml = await factory.open_impl(NAME, CONFIG)
        cursor = await ml.open_cursor("check", InitialPosition.EARLIEST)
        found: dict[int, Position] = {}
        while batch := await cursor.read_entries(500):
            for entry in batch:
                seq = parse_seq(entry.data)
                assert entry.data == payload(seq)
                found[seq] = entry.position
        missing = [s for s in reported if found.get(s) != reported[s]]
        assert not missing, f"{len(missing)} resolved appends missing, e.g. {missing[:5]}"
        await ml.delete_cursor("check")
    finally:
        await factory.close()
