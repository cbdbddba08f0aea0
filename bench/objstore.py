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
- PUTs per second at the same load, 2,000 msg/s (batching 1 ms), sent to 1
  topic and spread over 1,000 (from the broker's
  `magnetar_object_store_requests_total{kind="put"}`, object storage only):
  a round is one PUT whatever the number of topics, so the two match;
- catch-up read: a backlog written, the broker restarted (so nothing is in
  its cache), then one Exclusive consumer reads it all;
- retention (object storage only): a topic of small ledgers written, its
  subscription acknowledges the first 90%, the trimmed ledgers go and the
  collector (1 s interval, 2 s grace here) deletes their objects; the row is
  the bucket's bytes over the bytes of the ledgers still retained
  (internalStats), which should come near 1.

The figures to reach are issue 41's (the `vs journal` column).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pulsar

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
from magnetar.broker.storage.objects.store import ObjectStore, ObjectStoreConfig
from tests.support.seaweedfs import BUCKET, SeaweedServer

OBJECT = "magnetar-object"
JOURNAL = "magnetar-journal"
BROKERS = (OBJECT, JOURNAL, LITE)
PARTS = ("produce", "catchup", "retention")


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


def _round_robin(producers: list[pulsar.Producer], count: int, rate: float = 0.0) -> float:
    """Seconds to send `count` messages round-robin over `producers` (at
    `rate` msg/s when given), flushed; the producers are closed after."""
    start = time.perf_counter()
    for i in range(count):
        if rate:
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
        producers[i % len(producers)].send_async(PAYLOAD_100B, None)
    for p in producers:
        p.flush()
    elapsed = time.perf_counter() - start
    for p in producers:
        p.close()
    return elapsed


def produce_topics(url: str, prefix: str, topics: int, count: int) -> float:
    """msg/s for `count` batched sends round-robin over `topics` producers."""
    client = _client(url)
    try:
        producers = [_producer(client, f"{prefix}-{i}", True, 2000) for i in range(topics)]
        return count / _round_robin(producers, count)
    finally:
        client.close()


def paced_produce(url: str, prefix: str, topics: int, rate: int, seconds: float) -> float:
    """`rate` msg/s for `seconds`, round-robin over `topics` producers
    batching 1 ms (as the latency row); returns the seconds it took."""
    client = _client(url)
    try:
        producers = [
            client.create_producer(
                f"{prefix}-{i}",
                batching_enabled=True,
                batching_max_publish_delay_ms=1,
                block_if_queue_full=True,
            )
            for i in range(topics)
        ]
        return _round_robin(producers, int(rate * seconds), rate)
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


# Small ledgers, trimmed as soon as they are acknowledged, a quick collector.
RETAIN = {
    "managed_ledger_max_entries_per_ledger": "20",
    "managed_ledger_min_ledger_rollover_time_minutes": "0",
    "object_store_collect_interval_s": "1",
    "object_store_collect_grace_s": "2",
}


def retention(b: Broker, bucket: SeaweedServer, url: str, count: int) -> float:
    """Bucket bytes over retained ledger bytes once 90% of `count` is acked."""
    topic = "persistent://public/default/retained"
    client = _client(b.url)
    try:
        consumer = client.subscribe(topic, "bench", receiver_queue_size=1000)
        producer = client.create_producer(
            topic,
            batching_enabled=True,
            batching_max_messages=100,
            batching_max_publish_delay_ms=5,
            block_if_queue_full=True,
        )
        for _ in range(count):
            producer.send_async(PAYLOAD_100B, None)
        producer.flush()
        for _ in range(count * 9 // 10):
            last = consumer.receive(timeout_millis=20000)
        consumer.acknowledge_cumulative(last)
        consumer.close()
    finally:
        client.close()
    store = ObjectStore(ObjectStoreConfig(url, endpoint=bucket.endpoint))
    stats = f"http://127.0.0.1:{b.http_port}/admin/v2/{topic.replace('://', '/')}/internalStats"
    deadline = time.monotonic() + 60
    while True:  # the trim follows the ack; the collector, its interval
        time.sleep(1)
        with urllib.request.urlopen(stats, timeout=10) as rsp:
            ledgers = json.load(rsp)["ledgers"]
        retained: int = sum(max(0, int(led["size"])) for led in ledgers)
        held = sum(o.size for o in asyncio.run(store.list_objects("")))
        if held <= retained * 1.15 or time.monotonic() > deadline:
            return held / retained


@contextlib.contextmanager
def _broker(
    kind: str, workdir: Path, bucket: SeaweedServer, seq: int, extra: dict[str, str] | None = None
) -> Iterator[Broker]:
    if kind == OBJECT:
        settings = {
            "storage": "object",
            "object_store_url": f"s3://{BUCKET}/bench-{seq}",
            "object_store_endpoint": bucket.endpoint,
            **(extra or {}),
        }
        with start_broker("magnetar-fsync", workdir / "object", settings) as b:
            yield b
    elif kind == JOURNAL:
        with start_broker("magnetar-fsync", workdir / "journal") as b:
            yield b
    else:
        with start_broker(LITE, workdir / "lite") as b:
            yield b


def run(scale: float, rounds: int, parts: tuple[str, ...] = PARTS) -> list[Row]:
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
                for one in (1, 1000) if "produce" in parts else ():
                    topics = f"{one} topic{'s' if one > 1 else ''}"
                    with _broker(kind, workdir / f"{seq}-{one}", bucket, seq * 10 + one) as b:
                        rate = produce_topics(b.url, f"b{seq}", one, n_batched)
                        Row.record(rows, f"batched produce, {topics}", "msg/s", True, kind, rate)
                        if kind == OBJECT:
                            puts = _put_count(b)
                            elapsed = paced_produce(b.url, f"p{seq}", one, 2000, 20 * scale)
                            per_s = (_put_count(b) - puts) / elapsed
                            name = f"PUTs per second at 2,000 msg/s, {topics}"
                            Row.record(rows, name, "PUT/s", False, kind, per_s)
                if "produce" in parts:
                    with _broker(kind, workdir / f"{seq}-u", bucket, seq * 10 + 2) as b:
                        rate = produce(b.url, f"u{seq}", n_plain, batched=False)
                        Row.record(rows, "unbatched produce, 1 topic", "msg/s", True, kind, rate)
                        _p50, p99 = end_to_end_latency(b.url, f"e{seq}", 2000, 10 * scale)
                        Row.record(rows, "end to end p99 at 2,000 msg/s", "ms", False, kind, p99)
                if "catchup" in parts:
                    directory = workdir / f"{seq}-r"
                    with _broker(kind, directory, bucket, seq * 10 + 3) as b:
                        _backlog(b.url, f"r{seq}", n_backlog)
                    with _broker(kind, directory, bucket, seq * 10 + 3) as b:
                        rate = consume(b.url, f"r{seq}", n_backlog, shared=False)
                        Row.record(rows, "catch-up read of a backlog", "msg/s", True, kind, rate)
                if "retention" in parts and kind == OBJECT:
                    with _broker(kind, workdir / f"{seq}-t", bucket, seq * 10 + 4, RETAIN) as b:
                        ratio = retention(b, bucket, f"s3://{BUCKET}/bench-{seq * 10 + 4}", n_plain)
                        name = "bucket bytes / retained bytes after 90% is acknowledged"
                        Row.record(rows, name, "x", False, kind, ratio)
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
    puts = [r.median(OBJECT) for r in rows if r.name.startswith("PUTs per second")]
    if len(puts) == 2 and puts[0]:
        print(f"PUTs per second, 1,000 topics / 1 topic: {puts[1] / puts[0]:.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench objstore", description=__doc__)
    parser.add_argument("--scale", type=float, default=1.0, help="message counts x this")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--only", choices=PARTS, action="append", help="run these rows only (default: all)"
    )
    args = parser.parse_args(argv)
    rows = run(args.scale, args.rounds, tuple(args.only or PARTS))
    print_table(rows, args.rounds, int(1_000_000 * args.scale))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
