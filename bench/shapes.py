"""Batched produce of messages in the shapes applications send (`python -m bench shapes`).

`bench compare` sends equal 100-byte messages, the one shape whose batches
the pure-Python batch check walks in strided runs. Applications send
payloads of varying size, keys and properties; the broker walks every
message of every batch it stores (issue 28.2). Per shape, the official
client sends N messages batched (1,000 / 5 ms, as compare's producers) to
Magnetar (`fsync`) and pulsar-lite, alternating within each round; the table
shows each broker's CPU time per message and the throughput, medians over
the rounds. A second table times the walk alone in-process per shape:
batch_walk as built (compiled by mypyc where setup.py could), the same
module run as Python, and the strided pure-Python check.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import compare
from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.batch_check import (
    COMPILED_WALK,
    source_walk,
    strided_problem,
    walked_problem,
)
from magnetar.proto.messages import build_batch

KINDS = ("magnetar-fsync", compare.LITE)
_RNG = random.Random(28)
_SIZES = [_RNG.randint(60, 140) for _ in range(1000)]
_KEYS = [f"key-{i}" for i in range(1000)]


def _payload(i: int) -> bytes:
    return b"x" * _SIZES[i % 1000]


# Shape -> how the i-th message is sent: (payload, send_async keyword arguments).
SHAPES: dict[str, Callable[[int], tuple[bytes, dict[str, Any]]]] = {
    "equal 100 B": lambda i: (compare.PAYLOAD_100B, {}),
    "60-140 B": lambda i: (_payload(i), {}),
    "100 B, a key each": lambda i: (compare.PAYLOAD_100B, {"partition_key": _KEYS[i % 1000]}),
    "100 B, a property each": lambda i: (
        compare.PAYLOAD_100B,
        {"properties": {"trace": _KEYS[i % 1000]}},
    ),
}


def produce(url: str, topic: str, count: int, shape: str) -> float:
    """Messages per second for `count` batched async sends of `shape`, then flush."""
    make = SHAPES[shape]
    messages = [make(i) for i in range(1000)]
    client = compare._client(url)
    try:
        producer = compare._producer(client, topic, True)
        start = time.perf_counter()
        for i in range(count):
            payload, extra = messages[i % 1000]
            producer.send_async(payload, None, **extra)
        producer.flush()
        elapsed = time.perf_counter() - start
        producer.close()
        return count / elapsed
    finally:
        client.close()


def _batch(shape: str) -> tuple[bytes, int]:
    """A 1,000-message batch payload of `shape`, as the official client builds one."""
    messages = []
    for i in range(1000):
        payload, extra = SHAPES[shape](i)
        meta = pb.SingleMessageMetadata(payload_size=len(payload), sequence_id=i)
        if "partition_key" in extra:
            meta.partition_key = extra["partition_key"]
        for key, value in extra.get("properties", {}).items():
            meta.properties.add(key=key, value=value)
        messages.append((meta, payload))
    return build_batch(messages), 1000


def walk_costs(repeat: int = 200) -> None:
    """ns per message of each way of checking a 1,000-message batch."""
    python_walk = source_walk()
    checks: dict[str, Callable[[bytes, int], str | None]] = {
        f"batch_walk ({'compiled' if COMPILED_WALK else 'not compiled'})": walked_problem,
        "batch_walk run as Python": lambda b, n: walked_problem(b, n, 0, python_walk),
        "strided (pure Python)": strided_problem,
    }
    print("\nThe walk alone, in-process (ns per message of a 1,000-message batch):")
    print(f"| {'shape':<24} | " + " | ".join(f"{name:>26}" for name in checks) + " |")
    print("|" + "|".join("-" * (n + 2) for n in [24, *[26] * len(checks)]) + "|")
    for shape in SHAPES:
        body, count = _batch(shape)
        cells = []
        for check in checks.values():
            assert check(body, count) is None
            start = time.perf_counter()
            for _ in range(repeat):
                check(body, count)
            cells.append(f"{(time.perf_counter() - start) / repeat / count * 1e9:>26.0f}")
        print(f"| {shape:<24} | " + " | ".join(cells) + " |")


def run(count: int, rounds: int) -> None:
    cpu: dict[tuple[str, str], list[float]] = {}
    rate: dict[tuple[str, str], list[float]] = {}
    workdir = Path(tempfile.mkdtemp(prefix="magnetar-bench-shapes-"))
    for rnd in range(rounds):
        for kind in KINDS:
            with compare.start_broker(kind, workdir / f"r{rnd}", discard=True) as broker:
                for n, shape in enumerate(SHAPES):
                    before = compare._cpu_seconds(broker.proc.pid)
                    value = produce(broker.url, f"shape-{n}-{rnd}", count, shape)
                    used = (compare._cpu_seconds(broker.proc.pid) - before) / count * 1e6
                    cpu.setdefault((shape, kind), []).append(used)
                    rate.setdefault((shape, kind), []).append(value)
                    print(f"  [{kind} round {rnd}] {shape}: {value:,.0f} msg/s, "
                          f"broker CPU {used:.2f} us/msg", flush=True)  # fmt: skip
    mag, lite = KINDS
    print(f"\nBatched produce, {count:,} messages per shape, medians of {rounds} round(s); "
          f"ratio = {lite} / {mag} for CPU, {mag} / {lite} for msg/s "
          "(> 1: Magnetar better)")  # fmt: skip
    print(f"| {'shape':<24} | {'CPU ' + mag:>20} | {'CPU ' + lite:>17} | {'ratio':>5} "
          f"| {'msg/s ' + mag:>21} | {'msg/s ' + lite:>18} | {'ratio':>5} |")  # fmt: skip
    print("|" + "|".join("-" * n for n in (26, 22, 19, 7, 23, 20, 7)) + "|")
    for shape in SHAPES:
        c_m, c_l = (statistics.median(cpu[(shape, k)]) for k in KINDS)
        r_m, r_l = (statistics.median(rate[(shape, k)]) for k in KINDS)
        print(f"| {shape:<24} | {c_m:>20.2f} | {c_l:>17.2f} | {c_l / c_m:>5.2f} "
              f"| {r_m:>21,.0f} | {r_l:>18,.0f} | {r_m / r_l:>5.2f} |")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench shapes", description=__doc__)
    parser.add_argument("--count", type=int, default=300_000, help="messages per shape")
    parser.add_argument("--rounds", type=int, default=3)
    args, _ = parser.parse_known_args(argv)
    run(args.count, args.rounds)
    walk_costs()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
