"""Crash safety under SIGKILL: a child appends with the ``fsync`` policy and acks
through a durable cursor; the test kills it at random moments, reopens, and checks
that every reported append is there byte for byte, that no corrupt entry is ever
returned, that appends continue, and that the recovered cursor never treats an
unacked position as acked while keeping everything persisted before the last
reported flush (SEM-3.9, SEM-5.2).
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from magnetar.broker.storage import EARLIEST, FileManagedLedgerFactory, Position
from tests.integration.storage.crash_child import CONFIG, NAME, parse_seq, payload
from tests.integration.storage.crash_support import run_until_killed

CHILD = str(Path(__file__).with_name("crash_child.py"))
ROUNDS = 22


class Claims:
    """What the children said they acked (a superset of what they did)."""

    def __init__(self) -> None:
        self.individual: set[Position] = set()
        self.mark_delete = Position(-1, -1)  # highest cumulative ack claimed

    def covers(self, pos: Position) -> bool:
        return pos <= self.mark_delete or pos in self.individual

    def add(self, kind: str, pos: Position) -> None:
        if kind == "m":
            self.mark_delete = max(self.mark_delete, pos)
        else:
            self.individual.add(pos)


async def _verify(
    data_dir: str, reported: dict[int, Position], claims: Claims, guaranteed: set[Position]
) -> None:
    f = await FileManagedLedgerFactory.create(data_dir, CONFIG)
    try:
        ml = await f.open(NAME)
        entries = await ml.read_entries(EARLIEST, 1 << 40, 1 << 50)
        stored = {e.position: e.data for e in entries}
        assert len(stored) == len(entries)
        for e in entries:  # never a corrupt entry: each is some append's exact bytes
            assert e.data == payload(parse_seq(e.data)), e.position
        for seq, pos in reported.items():
            assert stored.get(pos) == payload(seq), (seq, pos)
        cursor = ml.get_cursor("sub")
        assert cursor is not None
        for pos in stored:
            if cursor.is_deleted(pos):
                assert claims.covers(pos), f"{pos} acked after recovery but never acked"
        for pos in guaranteed:
            assert cursor.is_deleted(pos), f"{pos} was acked and flushed, came back unacked"
    finally:
        await f.close()


def _tear_tail(data_dir: str, rng: random.Random) -> int:
    """Append half a record to the newest ledger file, as a power cut mid-write
    would leave it (SIGKILL alone never tears a write). Returns 1 if it did."""
    ledgers = list(Path(data_dir, "ledgers").glob("*/*.log"))
    if not ledgers:
        return 0
    newest = max(ledgers, key=lambda p: int(p.stem))
    record = b"\x01\x02\x03\x04" + (5000).to_bytes(4, "little") + (1).to_bytes(4, "little")
    with newest.open("ab") as fh:
        fh.write((record + rng.randbytes(64))[: rng.randint(1, 76)])
    return 1


def _ledger_sizes(data_dir: str) -> dict[Path, int]:
    return {p: p.stat().st_size for p in Path(data_dir, "ledgers").glob("*/*.log")}


def _lose_unsynced_tails(data_dir: str, before: dict[Path, int], rng: random.Random) -> int:
    """Cut every ledger file back to somewhere after its size before the child
    ran, as a crash of the operating system would: the ledger files are not
    fsynced on the append path (the journal is), and the previous child's
    writes were synced when its journal was replayed. Returns the bytes lost."""
    lost = 0
    for path, size in _ledger_sizes(data_dir).items():
        keep = rng.randint(before.get(path, 0), size)
        if keep < size:
            os.truncate(path, keep)
            lost += size - keep
    return lost


@pytest.mark.slow
async def test_sigkill_never_loses_a_receipt_or_invents_an_ack(tmp_path: Path) -> None:
    """SEM-5.2 under SIGKILL, with torn tails."""
    await _crash_rounds(str(tmp_path), lose_tails=False)


@pytest.mark.slow
async def test_lost_ledger_file_tails_come_back_from_the_journal(tmp_path: Path) -> None:
    """SEM-5.2 after a crash of the operating system: what the ledger files
    lost of the last run (they are fsynced by checkpoints only) is copied back
    from the journal, so every receipt is still there byte for byte."""
    await _crash_rounds(str(tmp_path), lose_tails=True)


async def _crash_rounds(data_dir: str, lose_tails: bool) -> None:
    rng = random.Random(20240611)
    reported: dict[int, Position] = {}
    claims = Claims()
    guaranteed: set[Position] = set()
    next_seq = 0
    torn = 0
    lost = 0
    for _ in range(ROUNDS):
        before = _ledger_sizes(data_dir)
        # Killed a random moment after "ready".
        lines = await run_until_killed(CHILD, [data_dir, str(next_seq)], 1, rng.uniform(0.02, 0.35))
        acks: list[tuple[str, Position]] = []
        for line in lines:
            kind, *rest = line.split()
            if kind == "a":
                seq, lid, eid = map(int, rest)
                assert seq not in reported
                reported[seq] = Position(lid, eid)
                next_seq = max(next_seq, seq + 1)
            elif kind in ("k", "m"):
                pos = Position(int(rest[0]), int(rest[1]))
                claims.add(kind, pos)
                acks.append((kind, pos))
            elif kind == "f":
                for kind_, pos in acks[: int(rest[0])]:
                    if kind_ == "k":
                        guaranteed.add(pos)
                    else:
                        guaranteed.update(p for p in reported.values() if p <= pos)
        # Appends the child made but never reported may exist: skip their seqs.
        next_seq += 1000
        if lose_tails:
            lost += _lose_unsynced_tails(data_dir, before, rng)
        if rng.random() < 0.4:
            torn += _tear_tail(data_dir, rng)
        await _verify(data_dir, reported, claims, guaranteed)
    assert len(reported) > 500
    assert guaranteed
    assert torn >= 3
    assert lost > 0 or not lose_tails
    # Appends continue after all that.
    f = await FileManagedLedgerFactory.create(data_dir, CONFIG)
    try:
        ml = await f.open(NAME)
        pos = await ml.add_entry(payload(next_seq))
        assert (await ml.read_positions([pos]))[0].data == payload(next_seq)
    finally:
        await f.close()
