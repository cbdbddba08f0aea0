"""Crash safety with a thousand topics on one journal: a child appends over
1,000 managed ledgers (created while it runs, more topics than open files),
the test kills it with SIGKILL at random moments, some of them while topics
are still being created, reopens every ledger and checks SEM-5.2 for each:
every reported append is there byte for byte, and every entry served is an
exact append of that same topic (no torn entry, none of another topic's)."""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import sys
from pathlib import Path

import pytest

from magnetar.broker.storage import EARLIEST, FileManagedLedgerFactory, Position
from tests.integration.storage.crash_many_child import CONFIG, MAX_OPEN_FILES, name, parse, payload
from tests.integration.storage.crash_support import run_until_killed

CHILD = str(Path(__file__).with_name("crash_many_child.py"))
TOPICS = 1000


async def _verify(data_dir: str, reported: dict[int, dict[int, Position]]) -> int:
    """Every topic's entries checked; returns how many entries are stored."""
    f = await FileManagedLedgerFactory.create(data_dir, CONFIG, max_open_files=MAX_OPEN_FILES)
    stored_total = 0
    try:
        for topic in range(TOPICS):
            ml = await f.open(name(topic))
            entries = await ml.read_entries(EARLIEST, 1 << 40, 1 << 50)
            stored: dict[Position, bytes] = {}
            for e in entries:
                owner, seq = parse(e.data)
                assert owner == topic, f"{name(topic)} serves an entry of topic {owner}"
                assert e.data == payload(topic, seq), (topic, e.position)
                stored[e.position] = e.data
            assert len(stored) == len(entries)
            for seq, pos in reported.get(topic, {}).items():
                assert stored.get(pos) == payload(topic, seq), (topic, seq, pos)
            stored_total += len(entries)
            await ml.close()
    finally:
        await f.close()
    return stored_total


def _lose_what_was_not_synced(data_dir: str, before: dict[Path, int], rng: random.Random) -> int:
    """What a crash of the operating system may take from the last run, where
    only the journal was fsynced: a directory or file created in it (neither
    is fsynced when made) and any tail written in it (every file was synced
    when the previous run's journal was replayed). Returns the items lost."""
    lost = 0
    for ml_dir in Path(data_dir, "ledgers").iterdir():
        if ml_dir not in before and rng.random() < 0.2:
            shutil.rmtree(ml_dir)
            lost += 1
            continue
        for path in ml_dir.glob("*.log"):
            if path not in before and rng.random() < 0.3:
                path.unlink()
                lost += 1
                continue
            size = path.stat().st_size
            keep = rng.randint(before.get(path, 0), size)
            if keep < size:
                os.truncate(path, keep)
                lost += 1
    return lost


def _synced_before(data_dir: str) -> dict[Path, int]:
    """Ledger directories and files (with their sizes) before a run."""
    root = Path(data_dir, "ledgers")
    if not root.exists():
        return {}
    found = {d: 0 for d in root.iterdir()}
    found.update((p, p.stat().st_size) for p in root.glob("*/*.log"))
    return found


async def test_sigkill_with_a_thousand_topics_loses_no_receipt(tmp_path: Path) -> None:
    """SEM-5.2 over 1,000 topics sharing the journal, under SIGKILL."""
    await _crash_rounds(str(tmp_path), lose=False)


@pytest.mark.slow
async def test_os_crash_with_a_thousand_topics_loses_no_receipt(tmp_path: Path) -> None:
    """SEM-5.2 over 1,000 topics after crashes of the operating system: new
    ledger directories, files and tails lost come back from the journal."""
    await _crash_rounds(str(tmp_path), lose=True)


async def _crash_rounds(data_dir: str, lose: bool) -> None:
    rng = random.Random(20261125)
    reported: dict[int, dict[int, Position]] = {}
    next_seq = 0
    lost = 0
    # The first kill comes while topics are still being created.
    for receipts, kill_after in ((100, 0.05), (1500, rng.uniform(0, 0.5)), (1500, 0.2)):
        before = _synced_before(data_dir)
        args = [data_dir, str(next_seq), str(TOPICS)]
        # "ready", then that many receipts before the clock starts.
        for line in await run_until_killed(CHILD, args, 1 + receipts, kill_after):
            kind, *rest = line.split()
            if kind == "a":
                topic, seq, lid, eid = map(int, rest)
                assert seq not in reported.get(topic, {})
                reported.setdefault(topic, {})[seq] = Position(lid, eid)
                next_seq = max(next_seq, seq + 1)
        # Appends made but never reported may exist: the next run skips their seqs.
        next_seq += 10_000
        if lose:
            lost += _lose_what_was_not_synced(data_dir, before, rng)
        # Replay in a process allowed fewer open files than the ledgers written.
        replay = await asyncio.create_subprocess_exec(sys.executable, CHILD, data_dir, "replay")
        assert await replay.wait() == 0
        stored = await _verify(data_dir, reported)
        assert stored >= sum(len(r) for r in reported.values())
    assert len(reported) == TOPICS  # every topic got some receipt
    assert sum(len(r) for r in reported.values()) > 3000
    assert lost > 0 or not lose
