"""Ledgers on object storage against the local journal and pulsar-lite
(`python -m bench objstore`).

Three brokers alternate within each round: Magnetar with `storage =
"object"` on a SeaweedFS started here (S3 on loopback), Magnetar on its
local journal (`fsync`, as shipped), and pulsar-lite. The official client,
one process, 100-byte messages, as `bench compare` and `bench scale` drive
it (ConsoleLogger at Error, `send_async(payload, None)`). Rows:

- batched produce, 1 topic and 1,000 topics (1,000 messages / 5 ms batches);
- unbatched produce, 1 topic;
- end-to-end p99 at 2,000 msg/s (batching 1 ms);
- PUTs per second during the batched rows at 1 and 1,000 topics (from the
  broker's `magnetar_object_store_requests_total{kind="put"}`): a round is
  one PUT whatever the number of topics;
- catch-up read: a backlog written, the broker restarted (so nothing is in
  its cache), then one Exclusive consumer reads it all.

The figures to reach are issue 41's (the `vs journal` column).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from bench.compare import (
    LITE,
    PAYLOAD_100B,
    Broker,
    Row,
    _client,
    _producer,
    consume,
    end_to_end_latency,
    produce,
    start_broker,
)
from tests.support.seaweedfs import BUCKET, SeaweedServer

OBJECT = "magnetar-object"
JOURNAL = "magnetar-journal"
BROKERS = (OBJECT, JOURNAL, LITE)


def _put_count(broker: Broker) -> float:
    if not broker.http_port:
        return float("nan")
    url = f"http://127.0.0.1:{broker.http_port}/metrics"
    deadline = time.monotonic() + 20
    while True:  # the HTTP port opens a moment after the binary one
        try:
            with urllib.request.urlopen(url, timeout=5) as rsp:
                text = rsp.read().decode()
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    for line in text.splitlines():
        if line.startswith('magnetar_object_store_requests_total{kind="put"}'):
            return float(line.split()[-1])
    return 0.0


def produce_topics(url: str, prefix: str, topics: int, count: int) -> float:
    """msg/s for `count` batched sends round-robin over `topics` producers."""
    client = _client(url)
    try:
        producers = [_producer(client, f"{prefix}-{i}", True, 2000) for i in range(topics)]
        start = time.perf_counter()
        for i in range(count):
            producers[i % topics].send_async(PAYLOAD_100B, None)
        for p in producers:
            p.flush()
        elapsed = time.perf_counter() - start
        for p in producers:
            p.close()
        return count / elapsed
    finally:
        client.close()


def _backlog(url: str, topic: str, count: int) -> None:
    client = _client(url)
    try:
        client.subscribe(topic, "bench").close()
        producer = _producer(client, topic, True)
        for _ in range(count):
            producer.send_async(PAYLOAD_100B, None)
        producer.flush()
        producer.close()
    finally:
        client.close()


@contextlib.contextmanager
def _broker(kind: str, workdir: Path, bucket: SeaweedServer, seq: int) -> Iterator[Broker]:
    if kind == OBJECT:
        settings = {
            "storage": "object",
            "object_store_url": f"s3://{BUCKET}/bench-{seq}",
            "object_store_endpoint": bucket.endpoint,
        }
        with start_broker("magnetar-fsync", workdir / "object", settings) as b:
            yield b
    elif kind == JOURNAL:
        with start_broker("magnetar-fsync", workdir / "journal") as b:
            yield b
    else:
        with start_broker(LITE, workdir / "lite") as b:
            yield b


def run(scale: float, rounds: int) -> list[Row]:
    workdir = Path(tempfile.mkdtemp(prefix="magnetar-bench-objstore-"))
    rows: dict[str, Row] = {}
    n_batched = int(200_000 * scale)
    n_plain = int(30_000 * scale)
    n_backlog = int(1_000_000 * scale)
    bucket = SeaweedServer(workdir / "seaweedfs").start()
    os.environ.update(bucket.env())
    seq = 0
    try:
        for r in range(rounds):
            order = BROKERS if r % 2 == 0 else tuple(reversed(BROKERS))
            for kind in order:
                seq += 1
                for one in (1, 1000):
                    with _broker(kind, workdir / f"{seq}-{one}", bucket, seq * 10 + one) as b:
                        puts = _put_count(b)
                        start = time.perf_counter()
                        rate = produce_topics(b.url, f"b{seq}", one, n_batched)
                        elapsed = time.perf_counter() - start
                        name = f"batched produce, {one} topic{'s' if one > 1 else ''}"
                        Row.record(rows, name, "msg/s", True, kind, rate)
                        if kind == OBJECT:
                            per_s = (_put_count(b) - puts) / elapsed
                            Row.record(
                                rows, f"PUTs per second, {name}", "PUT/s", False, kind, per_s
                            )
                with _broker(kind, workdir / f"{seq}-u", bucket, seq * 10 + 2) as b:
                    rate = produce(b.url, f"u{seq}", n_plain, batched=False)
                    Row.record(rows, "unbatched produce, 1 topic", "msg/s", True, kind, rate)
                    _p50, p99 = end_to_end_latency(b.url, f"e{seq}", 2000, 10 * scale)
                    Row.record(rows, "end to end p99 at 2,000 msg/s", "ms", False, kind, p99)
                directory = workdir / f"{seq}-r"
                with _broker(kind, directory, bucket, seq * 10 + 3) as b:
                    _backlog(b.url, f"r{seq}", n_backlog)
                with _broker(kind, directory, bucket, seq * 10 + 3) as b:
                    rate = consume(b.url, f"r{seq}", n_backlog, shared=False)
                    Row.record(rows, "catch-up read of a backlog", "msg/s", True, kind, rate)
                print(f"round {r + 1} {kind} done", flush=True)
    finally:
        bucket.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return list(rows.values())


def print_table(rows: list[Row], rounds: int, n_backlog: int) -> None:
    print(
        f"\nobject storage (SeaweedFS on loopback) vs the local journal vs pulsar-lite, "
        f"medians of {rounds} rounds, spread (max - min) / median; catch-up backlog "
        f"{n_backlog:,} messages"
    )
    header = (
        f"| {'workload':<52} | {OBJECT:>16} | {JOURNAL:>16} | {LITE:>16} | {'vs journal':>10} |"
    )
    print(header)
    print("|" + "|".join("-" * (len(c)) for c in header.split("|")[1:-1]) + "|")
    for row in rows:
        cells = []
        for kind in BROKERS:
            m = row.median(kind)
            cells.append("-" if m != m else f"{m:,.1f} ±{row.spread(kind):.0f}%")
        obj, jnl = row.median(OBJECT), row.median(JOURNAL)
        vs = "-"
        if obj == obj and jnl == jnl and jnl and obj:
            vs = f"{obj / jnl if row.higher_is_better else jnl / obj:.2f}"
        print(
            f"| {row.name + ' (' + row.unit + ')':<52} | {cells[0]:>16} | {cells[1]:>16} "
            f"| {cells[2]:>16} | {vs:>10} |"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench objstore", description=__doc__)
    parser.add_argument("--scale", type=float, default=1.0, help="message counts x this")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    rows = run(args.scale, args.rounds)
    print_table(rows, args.rounds, int(1_000_000 * args.scale))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
