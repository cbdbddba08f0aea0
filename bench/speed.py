"""The broker's cost per message (issue 48): workloads A-D of `bench compare`.

Each workload runs in a client process of its own (a fresh official client,
its ConsoleLogger at Error), against each broker in turn within a round, and
reads the broker's CPU time (all its threads, from /proc) right before and
after its timed part:

- A. unbatched produce at saturation: one producer, `send_async(payload,
  None)` x 40,000, `max_pending_messages=5000`, `block_if_queue_full=True`,
  then `flush()`; an Exclusive subscription made first holds the data (its
  consumer closed, so nothing is dispatched meanwhile).
- B. batched produce, 300,000, batches of 1,000 / 5 ms.
- C. sync `send()` one at a time, 2,000, unbatched: p99, and broker CPU per send.
- D. end to end p99 at 2,000 msg/s for 5 s (batching 1 ms), received by a
  Shared consumer's message listener that acks each.

The same run measures the disk's fdatasync p99 (`bench floor`'s probe),
which C's and D's targets under `fsync` add to pulsar-lite's figure.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

import pulsar

from bench.compare import (
    BROKERS,
    PAYLOAD_100B,
    Row,
    _client,
    _cpu_seconds,
    _percentiles,
    _producer,
    start_broker,
)
from bench.floor import fdatasync_percentiles

WORKLOADS = ("A", "B", "C", "D")
COUNTS = {"A": 40_000, "B": 300_000, "C": 2_000, "D": 10_000}
E2E_RATE = 2_000


def _saturate(producer: pulsar.Producer, count: int, pid: int) -> dict[str, float]:
    """`count` x send_async(payload, None), then flush: rate and broker CPU."""
    cpu = _cpu_seconds(pid)
    start = time.perf_counter()
    for _ in range(count):
        producer.send_async(PAYLOAD_100B, None)
    producer.flush()
    elapsed = time.perf_counter() - start
    used = _cpu_seconds(pid) - cpu
    return {"msg/s": count / elapsed, "cpu": used / count * 1e6}


def _a(client: pulsar.Client, topic: str, count: int, pid: int) -> dict[str, float]:
    client.subscribe(topic, "hold", consumer_type=pulsar.ConsumerType.Exclusive).close()
    return _saturate(_producer(client, topic, batched=False), count, pid)


def _b(client: pulsar.Client, topic: str, count: int, pid: int) -> dict[str, float]:
    return _saturate(_producer(client, topic, batched=True), count, pid)


def _c(client: pulsar.Client, topic: str, count: int, pid: int) -> dict[str, float]:
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(PAYLOAD_100B)  # the topic is loaded and written once before the clock
    samples = []
    cpu = _cpu_seconds(pid)
    for _ in range(count):
        start = time.perf_counter()
        producer.send(PAYLOAD_100B)
        samples.append((time.perf_counter() - start) * 1000)
    used = _cpu_seconds(pid) - cpu
    p50, p99 = _percentiles(samples)
    return {"p50": p50, "p99": p99, "cpu": used / count * 1e6}


def _d(client: pulsar.Client, topic: str, count: int, pid: int) -> dict[str, float]:
    samples: list[float] = []
    done = threading.Event()

    def listener(consumer: Any, msg: Any) -> None:
        samples.append((time.perf_counter() - float(msg.properties()["t"])) * 1000)
        consumer.acknowledge(msg)
        if len(samples) == count:
            done.set()

    client.subscribe(
        topic,
        "e2e",
        consumer_type=pulsar.ConsumerType.Shared,
        receiver_queue_size=1000,
        message_listener=listener,
    )
    producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=1)
    cpu = _cpu_seconds(pid)
    interval = 1.0 / E2E_RATE
    start = time.perf_counter()
    for i in range(count):
        delay = start + i * interval - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        producer.send_async(
            PAYLOAD_100B, lambda _res, _id: None, properties={"t": repr(time.perf_counter())}
        )
    producer.flush()
    if not done.wait(60):
        raise RuntimeError(f"D received {len(samples)} of {count}")
    used = _cpu_seconds(pid) - cpu
    p50, p99 = _percentiles(samples)
    return {"p50": p50, "p99": p99, "cpu": used / count * 1e6}


_RUNNERS = {"A": _a, "B": _b, "C": _c, "D": _d}


def worker(workload: str, url: str, topic: str, count: int, pid: int) -> dict[str, float]:
    client = _client(url)
    try:
        return _RUNNERS[workload](client, topic, count, pid)
    finally:
        client.close()


def _in_process_of_its_own(
    workload: str, url: str, topic: str, count: int, pid: int
) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-m", "bench.speed", workload, url, topic, str(count), str(pid)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    figures: dict[str, float] = json.loads(out.stdout.decode().strip().splitlines()[-1])
    return figures


_ROWS = {
    "A": [
        ("A. unbatched produce at saturation", "msg/s", "msg/s", True),
        ("A. broker CPU per message", "cpu", "us/msg", False),
    ],
    "B": [
        ("B. batched produce", "msg/s", "msg/s", True),
        ("B. broker CPU per message", "cpu", "us/msg", False),
    ],
    "C": [
        ("C. sync send p50", "p50", "ms", False),
        ("C. sync send p99", "p99", "ms", False),
        ("C. broker CPU per send", "cpu", "us/msg", False),
    ],
    "D": [
        ("D. end to end p50 at 2,000 msg/s", "p50", "ms", False),
        ("D. end to end p99 at 2,000 msg/s", "p99", "ms", False),
        ("D. broker CPU per message", "cpu", "us/msg", False),
    ],
}


def run(
    scale: float, rounds: int, workdir: Path, workloads: tuple[str, ...] = WORKLOADS
) -> list[Row]:
    """Rows for the workloads, every broker once per round, brokers alternating."""
    rows: dict[str, Row] = {}
    record = partial(Row.record, rows)
    for rnd in range(rounds):
        with_fsync = fdatasync_percentiles(2000, str(workdir))
        record("fdatasync of 300 B, p99 (bench floor)", "ms", False, "disk", with_fsync[1])
        print(f"  [round {rnd}] fdatasync p99 {with_fsync[1]:.3f} ms", flush=True)
        for kind in BROKERS:
            for workload in workloads:
                # A broker per workload: none inherits another's files or cache.
                with start_broker(kind, workdir / f"s{rnd}{workload}", discard=True) as broker:
                    count = max(1, int(COUNTS[workload] * (scale if workload in "AB" else 1.0)))
                    topic = f"speed-{workload}-{rnd}"
                    figures = _in_process_of_its_own(
                        workload, broker.url, topic, count, broker.proc.pid
                    )
                for name, key, unit, higher in _ROWS[workload]:
                    record(name, unit, higher, kind, figures[key])
                shown = ", ".join(f"{k} {v:,.2f}" for k, v in figures.items())
                print(f"  [{kind} round {rnd}] {workload}: {shown}", flush=True)
    return list(rows.values())


def verdict(rows: list[Row]) -> list[str]:
    """Issue 48's acceptance, line by line, from the medians of this run."""
    by_name = {row.name: row for row in rows}
    lines = []
    disk = by_name.get("fdatasync of 300 B, p99 (bench floor)")
    disk_p99 = disk.median("disk") if disk else float("nan")
    lines.append(f"fdatasync p99 of this run (bench floor's probe): {disk_p99:.3f} ms")

    def med(name: str, broker: str) -> float:
        row = by_name.get(name)
        return row.median(broker) if row else float("nan")

    fsync, lite, none = BROKERS[0], BROKERS[1], BROKERS[2]
    checks = [
        ("A throughput >= 1.0x", med("A. unbatched produce at saturation", fsync)
         / med("A. unbatched produce at saturation", lite), 1.0, True),
        ("A CPU/msg <= 1.2x", med("A. broker CPU per message", fsync)
         / med("A. broker CPU per message", lite), 1.2, False),
        ("B CPU/msg with none <= 1.2x", med("B. broker CPU per message", none)
         / med("B. broker CPU per message", lite), 1.2, False),
        ("B CPU/msg with fsync <= 1.4x", med("B. broker CPU per message", fsync)
         / med("B. broker CPU per message", lite), 1.4, False),
        ("C p99 fsync <= lite + fdatasync p99 (ms over)", med("C. sync send p99", fsync)
         - med("C. sync send p99", lite) - disk_p99, 0.0, False),
        ("C p99 none <= lite (ms over)", med("C. sync send p99", none)
         - med("C. sync send p99", lite), 0.0, False),
        ("D p99 none <= lite (ms over)", med("D. end to end p99 at 2,000 msg/s", none)
         - med("D. end to end p99 at 2,000 msg/s", lite), 0.0, False),
        ("D p99 fsync <= lite + fdatasync p99 (ms over)",
         med("D. end to end p99 at 2,000 msg/s", fsync)
         - med("D. end to end p99 at 2,000 msg/s", lite) - disk_p99, 0.0, False),
    ]  # fmt: skip
    for name, value, bound, at_least in checks:
        met = value >= bound if at_least else value <= bound
        lines.append(f"{name}: {value:.2f} ({'met' if met else 'NOT met'})")
    return lines


def main(argv: list[str]) -> int:
    workload, url, topic, count, pid = argv
    figures = worker(workload, url, topic, int(count), int(pid))
    print(json.dumps(figures), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
