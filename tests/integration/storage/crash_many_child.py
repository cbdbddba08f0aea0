"""Child process of the many-topics crash test (not a test module).

Usage: ``python crash_many_child.py DATA_DIR FIRST_SEQ TOPICS``. Sixteen tasks
append round-robin over TOPICS managed ledgers (each opened, and on the first
run created, when first written) with the ``fsync`` policy, through the
broker's one journal, and print one line per resolved append, flushed:
``a TOPIC SEQ LEDGER ENTRY``. ``ready`` comes once the factory is open. It
runs until killed.

``python crash_many_child.py DATA_DIR replay`` opens the factory (which
replays the journals a killed child left) with a limit of 256 open files,
fewer than the ledgers a journal holds, and exits 0.
"""

from __future__ import annotations

import asyncio
import hashlib
import resource
import sys

from magnetar.broker.storage import FileManagedLedgerFactory, ManagedLedgerConfig, SyncPolicy
from magnetar.broker.storage.api import ManagedLedger

CONFIG = ManagedLedgerConfig(
    sync_policy=SyncPolicy.FSYNC,
    max_segment_size=16 * 1024,  # rollovers too, now and then
    retention_time_s=-1,
    retention_size_bytes=-1,
)
# Fewer open files than topics: the open-file limit closes and reopens them.
MAX_OPEN_FILES = 64


def name(topic: int) -> str:
    return f"public/default/persistent/many-{topic}"


def payload(topic: int, seq: int) -> bytes:
    """Bytes only this topic's append of ``seq`` has, 20 B .. ~1 KiB."""
    digest = hashlib.blake2b(b"%d/%d" % (topic, seq)).digest()
    size = 20 + (digest[0] * 256 + digest[1]) % 1000
    return b"%d:%d:" % (topic, seq) + (digest * (size // len(digest) + 1))[:size]


def parse(data: bytes) -> tuple[int, int]:
    topic, seq, _ = data.split(b":", 2)
    return int(topic), int(seq)


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def main(data_dir: str, first_seq: int, topics: int) -> None:
    factory = await FileManagedLedgerFactory.create(data_dir, CONFIG, max_open_files=MAX_OPEN_FILES)
    say("ready")
    opened: dict[int, ManagedLedger] = {}
    counter = first_seq

    async def appender() -> None:
        nonlocal counter
        while True:
            seq = counter
            counter += 1
            topic = seq % topics
            ml = opened.get(topic)
            if ml is None:
                ml = opened[topic] = await factory.open(name(topic))
            pos = await ml.add_entry(payload(topic, seq))
            say(f"a {topic} {seq} {pos.ledger_id} {pos.entry_id}")

    await asyncio.gather(*[appender() for _ in range(16)])


async def replay(data_dir: str) -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
    factory = await FileManagedLedgerFactory.create(data_dir, CONFIG, max_open_files=MAX_OPEN_FILES)
    await factory.close()


if __name__ == "__main__":
    if sys.argv[2] == "replay":
        asyncio.run(replay(sys.argv[1]))
    else:
        asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
