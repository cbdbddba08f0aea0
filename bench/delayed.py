"""Memory and speed of the delayed-delivery tracker (issue 11): 1M held
positions, due times spread over an hour, counted two ways (the tracker's
own accounting and tracemalloc's)."""

from __future__ import annotations

import argparse
import time
import tracemalloc

from magnetar.broker.features.delayed import DelayedDeliveryTracker
from magnetar.broker.storage.api import Position


def run(count: int) -> dict[str, float]:
    now = 1_700_000_000_000
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    tracker = DelayedDeliveryTracker(clock=lambda: now)
    started = time.perf_counter()
    for i in range(count):
        tracker.add(Position(7 + i // 50_000, i % 50_000), now + 1 + (i * 7919) % 3_600_000)
    added = time.perf_counter() - started
    traced = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return {
        "messages": count,
        "add per second": count / added,
        "bytes per message (tracker)": tracker.memory_bytes() / count,
        "bytes per message (tracemalloc)": traced / count,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--delayed-count", type=int, default=1_000_000)
    args, _ = parser.parse_known_args(argv)
    for name, value in run(args.delayed_count).items():
        print(f"delayed tracker: {name}: {value:,.1f}")
    return 0
