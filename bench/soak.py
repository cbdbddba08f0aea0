"""A steady, acknowledged load for minutes or hours (`python -m bench soak`).

One process produces to T topics at R msg/s offered (the official client,
batching on, 2 ms delay, payloads of about 30 bytes that carry the message's
index and send time); another receives everything through one Shared consumer
on all T topics and acknowledges each message at once. Every interval the
table gets a row per broker: messages received per second, the broker's RSS
and open files, Magnetar's entry cache bytes and event-loop stalls over
100 ms (from /metrics), and end-to-end p50 / p99 / max. At the end: messages
acknowledged to the producer but never received (lost) and received twice
(duplicates), the whole run's p50 / p99 / max, and with pulsar-lite in the
run, Magnetar's p99 and max against its (issue 50: at most 1.25x and 2x).

Brokers run one after the other on the same load: Magnetar as shipped
(fsync), then pulsar-lite where installed (`--brokers` chooses).
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import IO, Any

import pulsar

from bench.compare import LIKE_FOR_LIKE, LITE, start_broker

# Index within its topic, send time (ns since the epoch), padding to 30 bytes.
_RECORD = struct.Struct("<QQ")
_PAD = b"s" * (30 - _RECORD.size)
_MARK = "SOAK "


def _topics(prefix: str, n: int) -> list[str]:
    return [f"persistent://public/default/{prefix}-{i}" for i in range(n)]


def _client(url: str) -> pulsar.Client:
    # The C++ logger at Error: with a Python logger the official client's
    # multi-topic consumer still printed a DEBUG line for every message
    # (300 MB in 3 minutes), which took the consumer's CPU.
    return pulsar.Client(
        url,
        operation_timeout_seconds=30,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )


# ------------------------------------------------------------------ roles (subprocesses)


def run_producer(url: str, prefix: str, topics: int, rate: int, seconds: float, out: Path) -> None:
    """Offer `rate` msg/s over `topics` for `seconds`, then flush; write the
    acknowledged indexes of each topic (one byte each) to `out` (a topic
    whose flush failed counts as none acknowledged: "failed")."""
    client = _client(url)
    names = _topics(prefix, topics)
    producers = [
        client.create_producer(
            name,
            batching_enabled=True,
            batching_max_publish_delay_ms=2,
            max_pending_messages=10_000,
            block_if_queue_full=True,
        )
        for name in names
    ]
    # No callback per send: a Python callback costs the official client more
    # than the send itself (the client process would set the latency). A
    # producer whose flush succeeds had every send acknowledged.
    sent_per_topic = [0] * topics
    failed = 0

    sent = 0
    pack = _RECORD.pack
    start = time.monotonic()
    end = start + seconds
    while True:
        now = time.monotonic()
        if now >= end:
            break
        due = int((now - start) * rate)
        while sent < due:
            t = sent % topics
            seq = sent_per_topic[t]
            sent_per_topic[t] = seq + 1
            producers[t].send_async(pack(seq, time.time_ns()) + _PAD, None)
            sent += 1
        time.sleep(0.002)
    acked: list[bytes] = []
    for producer, count in zip(producers, sent_per_topic, strict=True):
        try:
            producer.flush()
            acked.append(b"\x01" * count)
        except pulsar.PulsarException:
            failed += 1
            acked.append(bytes(count))
    for producer in producers:
        producer.close()
    client.close()
    out.write_bytes(b"".join(a + b"\n" for a in acked))
    _emit({"sent": sent, "failed": failed})


def run_consumer(url: str, prefix: str, topics: int, out: Path) -> None:
    """Receive and acknowledge on all topics; report e2e latencies every
    second; stop once stdin says how many to
    expect and they arrived (or nothing came for 30 s)."""
    client = _client(url)
    names = _topics(prefix, topics)
    index = {name: i for i, name in enumerate(names)}
    consumer = client.subscribe(
        names,
        "soak",
        consumer_type=pulsar.ConsumerType.Shared,
        receiver_queue_size=2000,
        initial_position=pulsar.InitialPosition.Earliest,
    )
    _emit({"ready": True})
    seen = [bytearray() for _ in names]
    expected: list[int] = []

    def read_expectation() -> None:
        line = sys.stdin.readline()
        if line:
            expected.append(int(json.loads(line)["acked"]))

    threading.Thread(target=read_expectation, daemon=True).start()
    received = dups = 0
    samples: list[int] = []
    next_report = time.monotonic() + 1.0
    idle_since = time.monotonic()
    while True:
        try:
            msg = consumer.receive(timeout_millis=200)
        except pulsar.Timeout:
            msg = None
        now = time.monotonic()
        if msg is not None:
            idle_since = now
            seq, sent_ns = _RECORD.unpack_from(msg.data())
            samples.append(time.time_ns() - sent_ns)
            consumer.acknowledge(msg)
            t = index[msg.topic_name()]
            got = seen[t]
            if seq >= len(got):
                got.extend(bytes(seq + 1 - len(got)))
            if got[seq]:
                dups += 1
            else:
                got[seq] = 1
                received += 1
        if now >= next_report:
            _report(samples, received)
            samples = []
            next_report += 1.0
        if expected and (received >= expected[0] or now - idle_since > 30):
            break
    if samples:
        _report(samples, received)
    consumer.close()
    client.close()
    out.write_bytes(b"".join(bytes(s) + b"\n" for s in seen))
    _emit({"done": True, "received": received, "duplicates": dups})


def _emit(row: dict[str, Any]) -> None:
    """A line for the driver on the original stdout (see _own_stdout)."""
    _REPORTS[0].write(_MARK + json.dumps(row) + "\n")
    _REPORTS[0].flush()


_REPORTS: list[IO[str]] = [sys.stdout]


def _own_stdout() -> None:
    """Keep fd 1 for our lines; the C++ client's own output goes to stderr
    (it writes to fd 1 from its threads, in the middle of our lines)."""
    _REPORTS[0] = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)


def _report(samples: list[int], received: int) -> None:
    """Cumulative count and this second's latencies (ms, 0.01 ms steps)."""
    _emit({"received": received, "lat": [round(x / 1e6, 2) for x in samples]})


# ----------------------------------------------------------------------- the driver


def _rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def _open_files(pid: int) -> int:
    try:
        return len(list(Path(f"/proc/{pid}/fd").iterdir()))
    except OSError:
        return -1


def _metrics(http_port: int) -> dict[str, float]:
    """The two Magnetar gauges the table shows (empty for pulsar-lite)."""
    if not http_port:
        return {}
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=5) as rsp:
            text = rsp.read().decode()
    except OSError:
        return {}
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("magnetar_storage_cache_used_bytes "):
            out["cache"] = float(line.split()[1])
        elif line.startswith('magnetar_event_loop_lag_seconds_bucket{le="0.1"}'):
            out["lag_le_100ms"] = float(line.split()[1])
        elif line.startswith("magnetar_event_loop_lag_seconds_count "):
            out["lag_count"] = float(line.split()[1])
        elif line.startswith("magnetar_event_loop_lag_seconds_max "):
            out["lag_max"] = float(line.split()[1])
    return out


def _role_cmd(role: str, args: argparse.Namespace, url: str, prefix: str, out: Path) -> list[str]:
    return [
        sys.executable, "-m", "bench.soak", "--role", role, "--url", url, "--prefix", prefix,
        "--topics", str(args.topics), "--rate", str(args.rate), "--seconds", str(args.seconds),
        "--interval", str(args.interval), "--out", str(out),
    ]  # fmt: skip


class _Reports:
    """What the consumer said: latencies since the last take, its count, its end."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.latencies: list[float] = []
        self.received = 0
        self.done: dict[str, Any] = {}

    def read(self, stream: IO[str]) -> None:
        for line in stream:
            if not line.startswith(_MARK):
                continue
            row = json.loads(line[len(_MARK) :])
            with self.lock:
                if row.get("done"):
                    self.done = row
                elif "received" in row:
                    self.received = row["received"]
                    self.latencies.extend(row["lat"])

    def take(self) -> tuple[int, list[float]]:
        with self.lock:
            got, self.latencies = self.latencies, []
            return self.received, got


def soak(kind: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    prefix = f"soak-{kind}"
    acked_file = workdir / f"{kind}.acked"
    seen_file = workdir / f"{kind}.seen"
    rows: list[dict[str, Any]] = []
    # Every latency of the run (ms in 0.01 steps: a few thousand distinct
    # values), for the whole run's percentiles.
    whole: Counter[float] = Counter()
    with start_broker(kind, workdir) as broker:
        pid = broker.proc.pid
        consumer = subprocess.Popen(
            _role_cmd("consumer", args, broker.url, prefix, seen_file),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, errors="replace",
        )  # fmt: skip
        assert consumer.stdout is not None and consumer.stdin is not None
        while not (line := consumer.stdout.readline()).startswith(_MARK):
            if not line:
                raise RuntimeError("the soak consumer did not start")
        reports = _Reports()
        reader = threading.Thread(target=reports.read, args=(consumer.stdout,))
        reader.start()
        producer = subprocess.Popen(
            _role_cmd("producer", args, broker.url, prefix, acked_file),
            stdout=subprocess.PIPE, text=True, errors="replace",
        )  # fmt: skip
        start = time.monotonic()
        print(f"{kind}: RSS at start {_rss_mib(pid):.0f} MiB", flush=True)
        last_received = 0
        last_metrics = _metrics(broker.http_port)
        for k in range(1, int(args.seconds // args.interval) + 1):
            time.sleep(max(0.0, start + k * args.interval - time.monotonic()))
            metrics = _metrics(broker.http_port)
            received, latencies = reports.take()
            whole.update(latencies)
            latencies.sort()
            n = len(latencies)
            stalls = (metrics.get("lag_count", 0) - last_metrics.get("lag_count", 0)) - (
                metrics.get("lag_le_100ms", 0) - last_metrics.get("lag_le_100ms", 0)
            )
            row = {
                "t": k * args.interval,
                "msg/s": (received - last_received) / args.interval,
                "rss": _rss_mib(pid),
                "fds": _open_files(pid),
                "cache": metrics.get("cache", float("nan")) / 2**20,
                "stalls": stalls if metrics else float("nan"),
                "p50": latencies[n // 2] if n else float("nan"),
                "p99": latencies[min(n - 1, int(n * 0.99))] if n else float("nan"),
                "max": latencies[-1] if n else float("nan"),
            }
            rows.append(row)
            _print_row(kind, row)
            last_received, last_metrics = received, metrics
        out, _ = producer.communicate(timeout=args.seconds + 120)
        summary = json.loads(
            [line for line in out.splitlines() if line.startswith(_MARK)][-1][len(_MARK) :]
        )
        acked = [line for line in acked_file.read_bytes().split(b"\n")[:-1]]
        total_acked = sum(a.count(1) for a in acked)
        consumer.stdin.write(json.dumps({"acked": total_acked}) + "\n")
        consumer.stdin.flush()
        consumer.wait(timeout=120)
        reader.join()
        done = reports.done
        seen = seen_file.read_bytes().split(b"\n")[:-1]
        lost = 0
        for a, s in zip(acked, seen, strict=True):
            s = s + bytes(max(0, len(a) - len(s)))
            lost += sum(1 for i, flag in enumerate(a) if flag and not s[i])
        result = {
            "kind": kind,
            "rows": rows,
            "sent": summary["sent"],
            "failed": summary["failed"],
            "acked": total_acked,
            "lost": lost,
            "duplicates": int(done.get("duplicates", -1)),
            "rss_end": rows[-1]["rss"] if rows else float("nan"),
            "p50": _percentile(whole, 0.50),
            "p99": _percentile(whole, 0.99),
            "max": max(whole, default=float("nan")),
        }
    return result


def _percentile(counts: Counter[float], q: float) -> float:
    """The q-quantile of the samples counted (the same rank rule as a row's)."""
    total = sum(counts.values())
    if not total:
        return float("nan")
    rank = min(total - 1, int(total * q))
    seen = 0
    for value in sorted(counts):
        seen += counts[value]
        if seen > rank:
            return value
    return float("nan")


_HEADER = (
    f"{'broker':<16}{'t (s)':>7}{'msg/s':>9}{'RSS MiB':>9}{'fds':>6}{'cache MiB':>11}"
    f"{'stalls':>8}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}"
)


def _print_row(kind: str, row: dict[str, Any]) -> None:
    print(
        f"{kind:<16}{row['t']:>7.0f}{row['msg/s']:>9.0f}{row['rss']:>9.1f}{row['fds']:>6}"
        f"{row['cache']:>11.2f}{row['stalls']:>8.0f}{row['p50']:>9.2f}{row['p99']:>9.2f}"
        f"{row['max']:>9.1f}",
        flush=True,
    )


def _summary(result: dict[str, Any]) -> str:
    rows = result["rows"]
    half = rows[len(rows) // 2]["rss"] if rows else float("nan")
    growth = (result["rss_end"] / half - 1) * 100 if rows else float("nan")
    p99s = [r["p99"] for r in rows]
    maxes = [r["max"] for r in rows]
    return (
        f"{result['kind']}: sent {result['sent']}, acknowledged {result['acked']}, "
        f"topics whose flush failed {result['failed']}, lost {result['lost']}, "
        f"duplicates {result['duplicates']}; "
        f"RSS at the end {result['rss_end']:.1f} MiB ({growth:+.1f}% over the second half); "
        f"worst interval p99 {max(p99s, default=float('nan')):.2f} ms, "
        f"max {max(maxes, default=float('nan')):.1f} ms; "
        f"whole run p50 / p99 / max {result['p50']:.2f} / {result['p99']:.2f} / "
        f"{result['max']:.1f} ms"
    )


def _against_lite(results: list[dict[str, Any]]) -> list[str]:
    """Issue 50's latency lines: each Magnetar run's whole-run p99 and max
    against pulsar-lite's in the same invocation (targets 1.25x and 2x)."""
    lite = [r for r in results if r["kind"] == LITE]
    if not lite:
        return []
    out = []
    for r in results:
        if r["kind"] == LITE:
            continue
        p99 = r["p99"] / lite[0]["p99"]
        top = r["max"] / lite[0]["max"]
        out.append(
            f"{r['kind']} against {LITE}: p99 {p99:.2f}x (target <= 1.25: "
            f"{'met' if p99 <= 1.25 else 'not met'}), max {top:.2f}x (target <= 2: "
            f"{'met' if top <= 2 else 'not met'})"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench soak", description=__doc__)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--topics", type=int, default=20)
    parser.add_argument("--rate", type=int, default=8000, help="msg/s offered, all topics")
    parser.add_argument("--interval", type=float, default=60.0, help="seconds per table row")
    parser.add_argument(
        "--brokers", default=f"{LIKE_FOR_LIKE},{LITE}", help="comma-separated, run in order"
    )
    parser.add_argument("--role", choices=("producer", "consumer"), help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--prefix", help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.role:
        _own_stdout()
    if args.role == "producer":
        run_producer(args.url, args.prefix, args.topics, args.rate, args.seconds, args.out)
        return 0
    if args.role == "consumer":
        run_consumer(args.url, args.prefix, args.topics, args.out)
        return 0
    args.seconds = args.minutes * 60
    kinds = [k for k in args.brokers.split(",") if k]
    if LITE in kinds:
        try:
            import pulsar_lite  # noqa: F401
        except ImportError:
            print("pulsar-lite is not installed: Magnetar alone")
            kinds.remove(LITE)
    print(
        f"soak: {args.topics} topics, {args.rate} msg/s offered, {args.minutes:g} min, "
        f"a row every {args.interval:g} s",
        flush=True,
    )
    print(_HEADER, flush=True)
    results = []
    with tempfile.TemporaryDirectory(prefix="magnetar-soak-") as tmp:
        for kind in kinds:
            results.append(soak(kind, args, Path(tmp)))
    for result in results:
        print(_summary(result))
    for line in _against_lite(results):
        print(line)
    return 0 if all(r["lost"] == 0 and r["duplicates"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
