"""Child process of the object storage crash test (not a test module).

Usage: ``python crash_child.py DATA_DIR URL ENDPOINT FIRST_SEQ``. Appends
from several tasks to a ledger on object storage that rolls over every few
entries (so sealing runs all the time) while the collector runs every 0.2 s
with a 2 s grace; prints ``ready``, then ``a SEQ LEDGER ENTRY`` after each
append resolved. It runs until killed.
"""

from __future__ import annotations

import asyncio
import sys

from magnetar.broker.storage import InitialPosition, ManagedLedgerConfig
from magnetar.broker.storage.objects.factory import ObjectManagedLedgerFactory
from magnetar.broker.storage.objects.store import ObjectStoreConfig

NAME = "public/default/persistent/object-crash"
CONFIG = ManagedLedgerConfig(
    max_entries_per_ledger=8,
    min_rollover_time_s=0,
    retention_time_s=-1,  # keep everything: the parent checks every entry
    retention_size_bytes=-1,
)
GRACE_S = 2.0


def payload(seq: int) -> bytes:
    return b"%d:" % seq + bytes([seq % 251]) * (50 + seq % 700)


def parse_seq(data: bytes) -> int:
    return int(data.split(b":", 1)[0])


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def main(data_dir: str, url: str, endpoint: str, first_seq: int) -> None:
    factory = await ObjectManagedLedgerFactory.open_on(
        ObjectStoreConfig(url, endpoint=endpoint),
        data_dir,
        CONFIG,
        collect_interval_s=0.2,
        collect_grace_s=GRACE_S,
    )
    ml = await factory.open_impl(NAME, CONFIG)
    await ml.open_cursor("sub", InitialPosition.EARLIEST)
    next_seq = first_seq
    say("ready")

    async def appender() -> None:
        nonlocal next_seq
        while True:
            seq = next_seq
            next_seq += 1
            pos = await ml.add_entry(payload(seq))
            say(f"a {seq} {pos.ledger_id} {pos.entry_id}")

    await asyncio.gather(*[appender() for _ in range(6)])


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
