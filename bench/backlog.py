"""A large backlog held by a subscription, and a restart (`python -m bench backlog`).

The official client writes N unbatched 100-byte messages (default 3,000,000)
to one topic whose subscription was created first and has no consumer, so
the broker keeps them all. Then the broker is stopped (SIGTERM) and started
again on the same data, and a consumer of that subscription receives the
first 1,000. Printed per broker: the RSS after writing, the RSS after the
restart (once the 1,000 arrived), the time from listening to the 1,000th
message, and how long the process took to listen.

Magnetar as shipped (fsync), then pulsar-lite where installed.
"""

from __future__ import annotations

import argparse
import socket
import sys
import tempfile
import time
from pathlib import Path

from bench.compare import LIKE_FOR_LIKE, LITE, PAYLOAD_100B, _client, _producer, start_broker
from bench.soak import _rss_mib

TOPIC = "persistent://public/default/backlog"
FIRST = 1_000


def write(url: str, count: int) -> float:
    """Send `count` messages; the write rate in msg/s."""
    client = _client(url)
    try:
        client.subscribe(TOPIC, "hold").close()
        producer = _producer(client, TOPIC, batched=False)
        start = time.perf_counter()
        for _ in range(count):
            producer.send_async(PAYLOAD_100B, None)
        producer.flush()
        elapsed = time.perf_counter() - start
        producer.close()
        return count / elapsed
    finally:
        client.close()


def first_received(url: str) -> float:
    """Seconds until the first FIRST messages of the held subscription arrived."""
    start = time.perf_counter()
    client = _client(url)
    try:
        consumer = client.subscribe(TOPIC, "hold", receiver_queue_size=FIRST)
        for _ in range(FIRST):
            consumer.receive(timeout_millis=60_000)
        elapsed = time.perf_counter() - start
        consumer.close()
        return elapsed
    finally:
        client.close()


def _listening_after(broker_start: float, url: str) -> float:
    host, port = url.removeprefix("pulsar://").split(":")
    with socket.create_connection((host, int(port)), timeout=5):
        pass
    return time.perf_counter() - broker_start


def run(kind: str, count: int, workdir: Path) -> dict[str, float]:
    with start_broker(kind, workdir) as broker:
        rate = write(broker.url, count)
        time.sleep(1.0)  # receipts sent, buffers returned
        rss_written = _rss_mib(broker.proc.pid)
    spawned = time.perf_counter()
    with start_broker(kind, workdir) as broker:
        listen_s = _listening_after(spawned, broker.url)
        first_s = first_received(broker.url)
        rss_restarted = _rss_mib(broker.proc.pid)
    return {
        "write msg/s": rate,
        "RSS after writing MiB": rss_written,
        "RSS after restart MiB": rss_restarted,
        f"listening to {FIRST} received s": first_s,
        "process start to listening s": listen_s,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench backlog", description=__doc__)
    parser.add_argument("--messages", type=int, default=3_000_000)
    parser.add_argument("--brokers", default=f"{LIKE_FOR_LIKE},{LITE}")
    args = parser.parse_args(argv)
    kinds = [k for k in args.brokers.split(",") if k]
    if LITE in kinds:
        try:
            import pulsar_lite  # noqa: F401
        except ImportError:
            kinds.remove(LITE)
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="magnetar-backlog-") as tmp:
        for kind in kinds:
            results[kind] = run(kind, args.messages, Path(tmp))
            print(kind, {k: round(v, 3) for k, v in results[kind].items()}, flush=True)
    print(f"\nbacklog of {args.messages:,} unbatched 100-byte messages, then a restart")
    names = list(next(iter(results.values())))
    print(f"{'':<34}" + "".join(f"{k:>18}" for k in kinds))
    for name in names:
        print(f"{name:<34}" + "".join(f"{results[k][name]:>18.2f}" for k in kinds))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
