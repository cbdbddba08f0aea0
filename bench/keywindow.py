"""Memory per key of the key-window deduplication index (issue 11): 100k
keys of 36 characters (UUIDs), filled through the index's publish path over
real storage in a temporary directory."""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import tracemalloc
import uuid

from magnetar.broker.features.keywindow import KeyWindowIndex, KeyWindowPolicy
from magnetar.broker.storage import FileManagedLedgerFactory
from magnetar.broker.storage.api import ManagedLedgerConfig, Position, SyncPolicy


async def run(count: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as data:
        factory = await FileManagedLedgerFactory.create(
            data, ManagedLedgerConfig(sync_policy=SyncPolicy.NONE)
        )
        try:
            ledger = await factory.open("public/default/persistent/bench")
            policy = KeyWindowPolicy(window_ms=3_600_000, max_keys=count)
            index = KeyWindowIndex("bench", ledger, policy, snapshot_interval=count * 2)
            await index.open()
            keys = [str(uuid.uuid4()) for _ in range(count)]
            loop = asyncio.get_running_loop()
            tracemalloc.start()
            before = tracemalloc.get_traced_memory()[0]
            for i, key in enumerate(keys):
                stored: asyncio.Future[Position] = loop.create_future()
                index.storing(key, stored)
                stored.set_result(Position(3, i))
            await asyncio.sleep(0)  # the completion callbacks run
            traced = tracemalloc.get_traced_memory()[0] - before
            tracemalloc.stop()
            held = len(index)
            estimate = index.memory_bytes()
            await index.close(delete=True)  # positions here are not in the ledger
        finally:
            await factory.close()
    return {
        "keys": held,
        "bytes per key (index estimate, key string included)": estimate / held,
        "bytes per key (tracemalloc, key strings excluded)": traced / held,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keys", type=int, default=100_000)
    args, _ = parser.parse_known_args(argv)
    for name, value in asyncio.run(run(args.keys)).items():
        print(f"key window: {name}: {value:,.1f}")
    return 0
