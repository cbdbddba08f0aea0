"""Compaction throughput (issue 16): 1M messages over 10k keys stored in a
topic's ledger (real storage in a temporary directory), then one compaction
run; messages compacted per second, and the size of the view."""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time

from magnetar.broker.compaction.compactor import compact
from magnetar.broker.storage import FileManagedLedgerFactory
from magnetar.broker.storage.api import ManagedLedger, ManagedLedgerConfig, Position, SyncPolicy
from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.frames import Payload
from magnetar.proto.messages import build_batch, single_metadata


def _entry(first: int, count: int, keys: int, batch: int) -> bytes:
    if batch == 1:
        meta = pb.MessageMetadata(
            producer_name="bench",
            sequence_id=first,
            publish_time=1,
            partition_key=f"k{first % keys}",
        )
        return Payload.build(meta, b"value-%d" % first).data
    messages = []
    for i in range(first, first + count):
        body = b"value-%d" % i
        messages.append((single_metadata(body, partition_key=f"k{i % keys}"), body))
    meta = pb.MessageMetadata(
        producer_name="bench", sequence_id=first, publish_time=1, num_messages_in_batch=count
    )
    return Payload.build(meta, build_batch(messages)).data


async def _fill(ledger: ManagedLedger, messages: int, keys: int, batch: int) -> None:
    pending: list[asyncio.Future[Position]] = []
    for first in range(0, messages, batch):
        count = min(batch, messages - first)
        pending.append(
            asyncio.ensure_future(ledger.add_entry(_entry(first, count, keys, batch), count))
        )
        if len(pending) >= 1000:
            await asyncio.gather(*pending)
            pending.clear()
    await asyncio.gather(*pending)


async def run(messages: int, keys: int, batch: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as data:
        factory = await FileManagedLedgerFactory.create(
            data, ManagedLedgerConfig(sync_policy=SyncPolicy.NONE)
        )
        try:
            ledger = await factory.open("public/default/persistent/bench-compaction")
            await _fill(ledger, messages, keys, batch)
            started = time.perf_counter()
            view = await compact(ledger, None)
            seconds = time.perf_counter() - started
        finally:
            await factory.close()
    return {
        "messages": messages,
        "keys": keys,
        "messages per entry": batch,
        "seconds": seconds,
        "messages/s": messages / seconds,
        "entries kept": len(view),
        "messages kept": view.messages,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument(
        "--batches", type=int, nargs="*", default=[1, 100], help="messages per entry, each a run"
    )
    args, _ = parser.parse_known_args(argv)
    for batch in args.batches:
        result = asyncio.run(run(args.messages, args.keys, batch))
        print(
            f"compaction: {result['messages']:,.0f} messages / {result['keys']:,.0f} keys, "
            f"{batch} per entry: {result['seconds']:.2f} s, "
            f"{result['messages/s']:,.0f} messages/s; "
            f"view {result['entries kept']:,.0f} entries, {result['messages kept']:,.0f} messages"
        )
    return 0
