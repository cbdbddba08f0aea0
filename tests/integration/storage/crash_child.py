"""Child process of the storage crash test (not a test module).

Usage: ``python crash_child.py DATA_DIR FIRST_SEQ``. Appends entries with the
``fsync`` policy from several tasks and prints, one line each, flushed:

* ``ready`` once the ledger is open;
* ``a SEQ LEDGER ENTRY`` after the append of SEQ resolved (it is on disk);
* ``k LEDGER ENTRY`` just *before* acking that position individually;
* ``m LEDGER ENTRY`` just *before* a cumulative ack (mark-delete) there;
* ``f N`` after a flush that persisted (at least) the first N ack lines.

It runs until killed.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import sys

from magnetar.broker.storage import (
    FileManagedLedgerFactory,
    InitialPosition,
    ManagedLedgerConfig,
    Position,
    SyncPolicy,
)

NAME = "public/default/persistent/crash"
CONFIG = ManagedLedgerConfig(
    sync_policy=SyncPolicy.FSYNC,
    max_segment_size=128 * 1024,
    retention_time_s=-1,  # keep everything: the parent checks every entry
    retention_size_bytes=-1,
    cursor_persist_interval_s=0.02,
)


def payload(seq: int) -> bytes:
    """Deterministic bytes for a sequence number, 20 B .. ~6 KiB."""
    digest = hashlib.blake2b(seq.to_bytes(8, "big")).digest()
    size = 20 + (digest[0] * 256 + digest[1]) % 6000
    body = (digest * (size // len(digest) + 1))[:size]
    return b"%d:" % seq + body


def parse_seq(data: bytes) -> int:
    return int(data.split(b":", 1)[0])


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def main(data_dir: str, first_seq: int) -> None:
    factory = await FileManagedLedgerFactory.create(data_dir, CONFIG)
    ml = await factory.open(NAME)
    cursor = await ml.open_cursor("sub", InitialPosition.EARLIEST)
    rng = random.Random(first_seq)
    written: list[Position] = []
    acks = 0
    next_seq = first_seq
    say("ready")

    async def appender() -> None:
        nonlocal next_seq
        while True:
            seq = next_seq
            next_seq += 1
            pos = await ml.add_entry(payload(seq))
            written.append(pos)
            say(f"a {seq} {pos.ledger_id} {pos.entry_id}")

    async def acker() -> None:
        nonlocal acks
        while True:
            await asyncio.sleep(0.002)
            if not written:
                continue
            pos = rng.choice(written)
            if rng.random() < 0.05:
                say(f"m {pos.ledger_id} {pos.entry_id}")
                cursor.mark_delete(pos)
            else:
                say(f"k {pos.ledger_id} {pos.entry_id}")
                cursor.delete([pos])
            acks += 1

    async def flusher() -> None:
        while True:
            await asyncio.sleep(0.03)
            n = acks
            await cursor.flush()
            say(f"f {n}")

    await asyncio.gather(*[appender() for _ in range(8)], acker(), flusher())


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
