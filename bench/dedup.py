"""Produce throughput with deduplication off and on (issue 11: the hot path
pays one dict lookup and one compare per SEND). Our async client drives the
broker (the official client's own overhead would hide the difference);
Magnetar runs with fsync; the two settings alternate within one run and the
best of the rounds is kept."""

from __future__ import annotations

import argparse
import tempfile
import uuid
from pathlib import Path

from bench.compare import start_broker
from bench.producer import run_aio

PAYLOAD = b"x" * 100


def measure(count: int, rounds: int) -> dict[tuple[str, bool], float]:
    best: dict[tuple[str, bool], float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for round_index in range(rounds):
            for dedup in ("off", "on"):
                workdir = Path(tmp) / f"{dedup}-{round_index}"
                settings = {"broker_deduplication_enabled": str(dedup == "on").lower()}
                with start_broker("magnetar-fsync", workdir, settings) as broker:
                    for batched in (False, True):
                        topic = f"persistent://public/default/dedup-{uuid.uuid4().hex[:8]}"
                        rate = run_aio(broker.url, topic, count, PAYLOAD, batched)
                        key = (dedup, batched)
                        best[key] = max(best.get(key, 0.0), rate)
    return best


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dedup-count", type=int, default=100_000)
    parser.add_argument("--dedup-rounds", type=int, default=2)
    args, _ = parser.parse_known_args(argv)
    best = measure(args.dedup_count, args.dedup_rounds)
    print("| produce 100 B, magnetar.aio client, fsync | dedup off | dedup on | on/off |")
    print("|---|---|---|---|")
    for batched in (False, True):
        off, on = best[("off", batched)], best[("on", batched)]
        label = "batched" if batched else "unbatched"
        print(f"| {label} (msg/s) | {off:,.0f} | {on:,.0f} | {on / off:.2f} |")
    return 0
