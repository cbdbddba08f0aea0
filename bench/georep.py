"""Geo-replication (issue 45): two standalone brokers on loopback as clusters
"a" and "b" (fsync), linked as the geo tests link them
(tests/support/georep.py: each registered on the other, public/geo
replicating to both).

Throughput: `--messages` of 100 B produced on A by one official-client
producer (`send_async(payload, None)`, then flush; batched and unbatched
rows). A's produce rate is the messages over the time to the flush; the
replication rate is the messages over the time from the first send until B
has stored the last one (B's msgInCounter for the topic, polled every 10
ms), so the ratio is what reaches B per second while A is loaded against
A's own rate.

Delay: a producer on A (unbatched) at `--rate` msg/s for `--seconds`, each
payload carrying its send time; a consumer on B (subscribed before the
first send) takes the time it receives each message: the delay is send to
receive, end to end (A's publish, the replicator, B's publish and dispatch),
after a second of warm-up.

    python -m bench georep -- --messages 100000 --rate 2000 --seconds 10
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import struct
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pulsar

from bench.compare import PAYLOAD_100B, _cpu_seconds, _producer, fast_logger, start_broker
from tests.support.georep import link

_SENT_AT = struct.Struct("<d")


@dataclass(frozen=True)
class Side:
    """A cluster as tests.support.georep sees one."""

    url: str
    http_url: str
    pid: int


@contextlib.contextmanager
def two_clusters(workdir: Path) -> Iterator[tuple[Side, Side]]:
    with (
        start_broker("magnetar-fsync", workdir / "a", {"cluster_name": "a"}) as a,
        start_broker("magnetar-fsync", workdir / "b", {"cluster_name": "b"}) as b,
    ):
        sides = tuple(Side(x.url, f"http://127.0.0.1:{x.http_port}", x.proc.pid) for x in (a, b))
        link({"a": sides[0], "b": sides[1]})
        yield sides[0], sides[1]


def _stored(side: Side, topic: str) -> int:
    """Messages the topic has taken in on `side` (0 until it exists there)."""
    url = f"{side.http_url}/admin/v2/{topic.replace('://', '/')}/stats"
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return int(json.load(answer)["msgInCounter"])
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return 0
        raise


def _client(url: str) -> pulsar.Client:
    return pulsar.Client(url, operation_timeout_seconds=30, io_threads=1, logger=fast_logger())


@dataclass(frozen=True)
class Throughput:
    produced: float  # A's produce rate, msg/s
    replicated: float  # the rate at which they reached B
    # Each broker's CPU seconds from the first send until B had the last.
    cpu_a: float
    cpu_b: float


def throughput(a: Side, b: Side, count: int, batched: bool) -> Throughput:
    """A's produce rate and the rate at which the messages reached B."""
    topic = f"persistent://public/geo/rate-{uuid.uuid4().hex[:8]}"
    client = _client(a.url)
    cpu = _cpu_seconds(a.pid), _cpu_seconds(b.pid)
    try:
        producer = _producer(client, topic, batched)
        start = time.perf_counter()
        for _ in range(count):
            producer.send_async(PAYLOAD_100B, None)
        producer.flush()
        produced = time.perf_counter() - start
        deadline = time.monotonic() + 300
        while _stored(b, topic) < count:
            if time.monotonic() > deadline:
                raise RuntimeError(f"B has {_stored(b, topic)} of {count} after 5 minutes")
            time.sleep(0.01)
        replicated = time.perf_counter() - start
        used = _cpu_seconds(a.pid) - cpu[0], _cpu_seconds(b.pid) - cpu[1]
        producer.close()
    finally:
        client.close()
    return Throughput(count / produced, count / replicated, *used)


def delays(a: Side, b: Side, rate: int, seconds: float) -> list[float]:
    """Send-to-receive seconds of each message sent at `rate` after the warm-up second."""
    topic = f"persistent://public/geo/delay-{uuid.uuid4().hex[:8]}"
    total, warm_up = int(rate * (seconds + 1)), rate
    receiver, sender = _client(b.url), _client(a.url)
    try:
        consumer = receiver.subscribe(topic, "delay", receiver_queue_size=5000)
        producer = sender.create_producer(topic, batching_enabled=False, block_if_queue_full=True)
        received: list[float] = []

        def receive() -> None:
            for _ in range(total):
                msg = consumer.receive(30_000)
                received.append(time.perf_counter() - _SENT_AT.unpack_from(msg.data())[0])
                consumer.acknowledge(msg)

        thread = threading.Thread(target=receive, daemon=True)
        thread.start()
        pad = PAYLOAD_100B[_SENT_AT.size :]
        start = time.perf_counter()
        for index in range(total):
            wait = start + index / rate - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            producer.send_async(_SENT_AT.pack(time.perf_counter()) + pad, None)
        producer.flush()
        thread.join(60)
        if len(received) != total:
            raise RuntimeError(f"B received {len(received)} of {total} messages")
    finally:
        sender.close()
        receiver.close()
    return received[warm_up:]


def _percentile(values: list[float], fraction: float) -> float:
    return sorted(values)[min(len(values) - 1, int(len(values) * fraction))]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench georep")
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=10.0)
    args, _ = parser.parse_known_args(argv)
    with tempfile.TemporaryDirectory() as tmp, two_clusters(Path(tmp)) as (a, b):
        print(
            f"| geo-replication, a -> b on loopback, fsync, {args.messages:,} msgs of 100 B "
            "| A produce msg/s | reaching B msg/s | ratio | A CPU s | B CPU s | wall s |"
        )
        print("|---|---|---|---|---|---|---|")
        for batched in (False, True):
            run = throughput(a, b, args.messages, batched)
            print(
                f"| official client, {'batched' if batched else 'unbatched'} "
                f"| {run.produced:,.0f} | {run.replicated:,.0f} "
                f"| {run.replicated / run.produced:.2f} | {run.cpu_a:.1f} | {run.cpu_b:.1f} "
                f"| {args.messages / run.replicated:.1f} |"
            )
        measured = delays(a, b, args.rate, args.seconds)
        ms = [d * 1000 for d in measured]
        print(
            f"\nDelay A send -> B receive at {args.rate:,} msg/s for {args.seconds:g} s "
            f"({len(ms):,} messages): p50 {statistics.median(ms):.1f} ms, "
            f"p99 {_percentile(ms, 0.99):.1f} ms, max {max(ms):.1f} ms"
        )
    return 0
