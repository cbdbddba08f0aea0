"""Magnetar vs pulsar-lite, driven by the official client (`make bench`).

Each workload runs against each broker in one process run, alternating, and
the table shows each figure and the ratio magnetar / pulsar-lite (for
latencies, lower is better, so the ratio is pulsar-lite / magnetar: above 1
means Magnetar is better in every row).

As shipped against as shipped: the ratio compares Magnetar under its default
sync policy `fsync` (a receipt means the entry is on disk) with pulsar-lite,
which does not fsync before it acknowledges a send (RocksDB underneath;
strace: a handful of fsyncs for thousands of receipts). Magnetar under `none`
is shown too, for what fsync costs. Each figure is the median of the rounds,
with ± half the spread between the best and the worst round.

Each throughput workload also gets a "broker CPU" row: the broker process's
CPU time (all threads) per message. On a small shared machine the client and
the broker split the free CPU, so the broker's share bounds the throughput
even where the client is the bottleneck.

Both brokers are started here as subprocesses on free loopback ports with
fresh data directories and stopped at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pulsar

PAYLOAD_100B = b"x" * 100


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"broker exited with {proc.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"broker did not listen on {port} within {timeout} s")


@dataclass
class Broker:
    name: str
    url: str
    proc: subprocess.Popen[bytes]
    # Magnetar's admin and /metrics port (0 for pulsar-lite).
    http_port: int = 0


def _lite_binary() -> str:
    import pulsar_lite

    return str(Path(pulsar_lite.__file__).parent / "bin" / "pulsar-lite")


@contextlib.contextmanager
def start_broker(
    kind: str, workdir: Path, settings: dict[str, str] | None = None, discard: bool = False
) -> Iterator[Broker]:
    """A broker subprocess; `settings` are extra MAGNETAR_* variables.

    With `discard`, once it has stopped its data is set aside (renamed into
    `.discarded` beside `workdir`; callers pass a directory inside their
    run's temporary one, deleted after the run) and the filesystem is
    synced, so the next broker measured does not pay for this one's
    write-back. Set aside, not deleted: on an ext4 without a journal (this
    machine's) the kernel passes over every inode freed in the last 60 s
    (360 s while its block is dirty) when it allocates one, and deleting a
    round's topic files made the next Magnetar's inodes cost many times
    more kernel time (README, Performance, "Deleting a round's data")."""
    port = _free_port()
    http_port = 0
    data = workdir / kind
    data.mkdir(parents=True, exist_ok=True)
    log = (workdir / f"{kind}.log").open("wb")
    if kind.startswith("magnetar"):
        http_port = _free_port()
        sync_policy = kind.partition("-")[2]
        cmd = [
            sys.executable,
            "-m",
            "magnetar.broker",
            "standalone",
            "--port",
            str(port),
            "--http-port",
            str(http_port),
            "--data-dir",
            str(data),
        ]
        env = {
            **os.environ,
            "MAGNETAR_SYNC_POLICY": sync_policy,
            "MAGNETAR_LOG_LEVEL": "warning",
            **{f"MAGNETAR_{k.upper()}": v for k, v in (settings or {}).items()},
        }
    else:
        cmd = [_lite_binary(), "--addr", f"127.0.0.1:{port}", "--db-path", str(data / "db")]
        env = {**os.environ, "RUST_LOG": "warn"}
    proc = subprocess.Popen(cmd, stdout=log, stderr=log, env=env, cwd=data)
    try:
        _wait_for_port(port, proc)
        if http_port:  # the admin API may listen a moment after the binary port
            _wait_for_port(http_port, proc)
        yield Broker(kind, f"pulsar://127.0.0.1:{port}", proc, http_port)
    finally:
        _PEAK_RSS_MIB[kind] = max(_PEAK_RSS_MIB.get(kind, 0.0), _peak_rss_mib(proc.pid))
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        if discard:
            aside = workdir.parent / ".discarded"
            aside.mkdir(exist_ok=True)
            data.rename(aside / f"{workdir.name}-{kind}-{time.monotonic_ns()}")
            os.sync()


_PEAK_RSS_MIB: dict[str, float] = {}


def _peak_rss_mib(pid: int) -> float:
    """The process's high-water resident set (VmHWM), from /proc on Linux."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


# Linux's encoding of a process CPU clock id: the pid inverted, shifted by
# three, and the clock kind (2: scheduler runtime).
_CPUCLOCK_SCHED = 2


def _cpu_seconds(pid: int) -> float:
    """CPU time (user plus system, all threads, those that ended included)
    of another process, in seconds to the nanosecond: the kernel's
    per-process CPU clock for that pid (clock_getcpuclockid's id). /proc's
    stat counts in clock ticks (10 ms), which for a row of 150 ms of broker
    CPU (B: 300,000 messages at 0.5 us) was a step of 7%. Falls back to
    /proc where the clock cannot be read."""
    try:
        return time.clock_gettime(((~pid) << 3) | _CPUCLOCK_SCHED)
    except OSError:
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return float("nan")
    fields = stat.rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# A broker at rest still wakes for its timers (Magnetar: about 3 ms of CPU a
# second); a window in which a process used less than this share of it is
# quiet (with /proc's 10 ms ticks, "unchanged" meant about the same).
IDLE_CPU_SHARE = 0.05


def cpu_quiet(before: float, after: float, window_s: float) -> bool:
    """Whether CPU seconds went from `before` to `after` over a window of
    `window_s` as a process at rest would."""
    return after - before < IDLE_CPU_SHARE * window_s


def _client(url: str) -> pulsar.Client:
    return pulsar.Client(url, operation_timeout_seconds=30, io_threads=1, logger=fast_logger())


def fast_logger() -> Any:
    """The official client's own C++ logger at Error, as an application that
    wants speed sets it: a Python `logging.Logger` makes the client call into
    Python for every log decision and capped the 1,000-topic unbatched loop
    at a third of its speed (issue 48)."""
    return pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


def produce(url: str, topic: str, count: int, batched: bool, callback: bool = False) -> float:
    """Messages per second for `count` async sends of 100 B, then flush.

    Without `callback` the loop is `send_async(payload, None)`: a Python
    callback per message makes the client the bottleneck (~30-40k msg/s
    whichever the broker), which hides the broker's own speed."""
    client = _client(url)
    try:
        producer = _producer(client, topic, batched)
        failures: list[Any] = []

        def done(res: Any, _msg_id: Any) -> None:
            if res != pulsar.Result.Ok:
                failures.append(res)

        on_done = done if callback else None
        start = time.perf_counter()
        for _ in range(count):
            producer.send_async(PAYLOAD_100B, on_done)
        producer.flush()
        elapsed = time.perf_counter() - start
        if failures:
            raise RuntimeError(f"{len(failures)} sends failed: {failures[:3]}")
        producer.close()
        return count / elapsed
    finally:
        client.close()


def _producer(
    client: pulsar.Client, topic: str, batched: bool, max_pending: int = 5000
) -> pulsar.Producer:
    """The producers of the throughput rows: 1,000 messages / 5 ms when batched."""
    return client.create_producer(
        topic,
        batching_enabled=batched,
        batching_max_messages=1000,
        batching_max_publish_delay_ms=5,
        max_pending_messages=max_pending,
        block_if_queue_full=True,
        send_timeout_millis=120_000,
    )


def _drain_batches(consumer: pulsar.Consumer, count: int) -> int:
    """batch_receive until `count` messages, a cumulative ack after each batch."""
    received = 0
    last = None
    while received < count:
        for msg in consumer.batch_receive():
            last = msg
            received += 1
        if last is not None:
            consumer.acknowledge_cumulative(last)
    return received


def consume(url: str, topic: str, count: int, shared: bool) -> float:
    """Messages per second reading `count` pre-produced messages from the start."""
    client = _client(url)
    try:
        consumer = client.subscribe(
            topic,
            f"bench-{'shared' if shared else 'exclusive'}",
            consumer_type=pulsar.ConsumerType.Shared if shared else pulsar.ConsumerType.Exclusive,
            initial_position=pulsar.InitialPosition.Earliest,
            receiver_queue_size=1000,
            batch_receive_policy=pulsar.ConsumerBatchReceivePolicy(1000, 0, 100),
        )
        received = 0
        start = time.perf_counter()
        if shared:
            while received < count:
                msg = consumer.receive(timeout_millis=10000)
                consumer.acknowledge(msg)
                received += 1
        else:
            received = _drain_batches(consumer, count)
        elapsed = time.perf_counter() - start
        consumer.close()
        return received / elapsed
    finally:
        client.close()


def consume_while_subscribed(url: str, topic: str, count: int, _unused: bool = False) -> float:
    """Messages per second from the first send to the last receive: `count`
    messages produced batched (1,000 / 5 ms) on the same client while an
    Exclusive consumer (receiver queue 1000, batch receive 1000 / 100 ms),
    subscribed first, drains them from another thread, as an application
    that produces and consumes at once sees it.

    (Until issue 48 this row timed the drain alone, after the producer's
    flush: it measured what a broker had already pushed against the permits,
    and pulsar-lite, which dispatches past them, had most of it in the
    receiver queue before the clock started.)"""
    client = _client(url)
    try:
        consumer = client.subscribe(
            topic,
            "bench-subscribed-first",
            consumer_type=pulsar.ConsumerType.Exclusive,
            receiver_queue_size=1000,
            batch_receive_policy=pulsar.ConsumerBatchReceivePolicy(1000, 0, 100),
        )
        producer = _producer(client, topic, batched=True)
        received: list[int] = []
        drainer = threading.Thread(target=lambda: received.append(_drain_batches(consumer, count)))
        start = time.perf_counter()
        drainer.start()
        for _ in range(count):
            producer.send_async(PAYLOAD_100B, None)
        producer.flush()
        drainer.join(timeout=300)
        elapsed = time.perf_counter() - start
        if not received:
            raise RuntimeError("the consumer did not receive every message within 300 s")
        consumer.close()
        return received[0] / elapsed
    finally:
        client.close()


def publish_latency(url: str, topic: str, count: int) -> tuple[float, float]:
    """p50 and p99 of synchronous send latency, in ms."""
    client = _client(url)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        samples = []
        for _ in range(count):
            start = time.perf_counter()
            producer.send(PAYLOAD_100B)
            samples.append((time.perf_counter() - start) * 1000)
        producer.close()
        return _percentiles(samples)
    finally:
        client.close()


def end_to_end_latency(url: str, topic: str, rate: int, seconds: float) -> tuple[float, float]:
    """p50 and p99 from send to receive, in ms, at a steady `rate` msg/s."""
    client = _client(url)
    try:
        consumer = client.subscribe(topic, "bench-e2e", receiver_queue_size=1000)
        producer = client.create_producer(
            topic, batching_enabled=True, batching_max_publish_delay_ms=1
        )
        total = int(rate * seconds)
        samples: list[float] = []

        def receive_all() -> None:
            for _ in range(total):
                msg = consumer.receive(timeout_millis=20000)
                sent = float(msg.properties()["t"])
                samples.append((time.perf_counter() - sent) * 1000)
                consumer.acknowledge(msg)

        reader = threading.Thread(target=receive_all)
        reader.start()
        interval = 1.0 / rate
        start = time.perf_counter()
        for i in range(total):
            target = start + i * interval
            delay = target - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            producer.send_async(
                PAYLOAD_100B, lambda _res, _id: None, properties={"t": repr(time.perf_counter())}
            )
        producer.flush()
        reader.join(timeout=60)
        return _percentiles(samples)
    finally:
        client.close()


def _percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p50 = statistics.median(ordered)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return p50, p99


@dataclass
class Row:
    name: str
    unit: str
    higher_is_better: bool
    samples: dict[str, list[float]]

    @staticmethod
    def record(
        rows: dict[str, Row], name: str, unit: str, higher: bool, broker: str, value: float
    ) -> None:
        """One round's sample of ``broker`` for the row ``name`` (made on first use)."""
        row = rows.setdefault(name, Row(name, unit, higher, {}))
        row.samples.setdefault(broker, []).append(value)

    def median(self, broker: str) -> float:
        values = self.samples.get(broker)
        return statistics.median(values) if values else float("nan")

    def spread(self, broker: str) -> float:
        """(max - min) / median over the rounds, in percent."""
        values = self.samples.get(broker)
        if not values or not statistics.median(values):
            return float("nan")
        return (max(values) - min(values)) / statistics.median(values) * 100

    def ratio(self) -> float:
        mag, lite = self.median(LIKE_FOR_LIKE), self.median(LITE)
        if not mag or not lite or mag != mag or lite != lite:
            return float("nan")
        return mag / lite if self.higher_is_better else lite / mag


LITE = "pulsar-lite"
# Magnetar as it ships (a receipt means the entry is fsynced) against
# pulsar-lite as it ships (no fsync before the receipt): the goal is >= 1.0
# anyway. magnetar-none shows what fsync costs.
LIKE_FOR_LIKE = "magnetar-fsync"
BROKERS = ("magnetar-fsync", LITE, "magnetar-none")


def run(scale: float, rounds: int) -> list[Row]:
    workdir = Path(tempfile.mkdtemp(prefix="magnetar-bench-"))
    n_batched = int(300_000 * scale)
    n_plain = int(40_000 * scale)
    rows: dict[str, Row] = {}
    # Broker CPU per message (all its threads): on a shared 2-core machine the
    # client and the broker split what is free, so this decides the rest.
    cpu_rows: list[tuple[str, str, float]] = []

    record = partial(Row.record, rows)

    try:
        # Brokers alternate within each round, so drift on this shared
        # machine touches every broker alike; medians over the rounds.
        for rnd in range(rounds):
            for kind in BROKERS:
                with start_broker(kind, workdir / f"r{rnd}", discard=True) as broker:
                    url = broker.url
                    tag = f"{kind}-{rnd}"
                    throughput: list[tuple[str, Callable[..., float], str, int, bool, bool]] = [
                        ("produce batched, no callback", produce, "b", n_batched, True, False),
                        ("produce batched, callback per send", produce, "bc",
                         n_batched, True, True),
                        ("produce unbatched, no callback", produce, "u", n_plain, False, False),
                        ("produce unbatched, callback per send", produce, "uc",
                         n_plain, False, True),
                        ("consume exclusive, batch receive + cumulative ack", consume, "b",
                         n_batched, False, False),
                        ("consume shared, receive + ack each", consume, "u", n_plain, True, False),
                        ("consume exclusive subscribed first, first send to last receive",
                         consume_while_subscribed, "s", n_batched, False, False),
                    ]  # fmt: skip
                    for name, fn, prefix, count, flag, callback in throughput:
                        extra = {"callback": True} if callback else {}
                        cpu = _cpu_seconds(broker.proc.pid)
                        value = fn(url, f"{prefix}-{tag}", count, flag, **extra)
                        cpu_us = (_cpu_seconds(broker.proc.pid) - cpu) / count * 1e6
                        record(name, "msg/s", True, kind, value)
                        cpu_rows.append((f"broker CPU: {name}", kind, cpu_us))
                        print(f"  [{kind} round {rnd}] {name}: {value:,.0f} msg/s, "
                              f"broker CPU {cpu_us:.1f} us/msg", flush=True)  # fmt: skip
                    p50, p99 = publish_latency(url, f"lat-{tag}", int(2000 * min(scale, 1.0)))
                    record("sync send latency p50, no batching", "ms", False, kind, p50)
                    record("sync send latency p99, no batching", "ms", False, kind, p99)
                    e50, e99 = end_to_end_latency(url, f"e2e-{tag}", 2000, 5.0 * min(scale, 1.0))
                    record("end to end p50 at 2,000 msg/s (batching, 1 ms)", "ms", False, kind, e50)
                    record("end to end p99 at 2,000 msg/s (batching, 1 ms)", "ms", False, kind, e99)
                    print(f"  [{kind} round {rnd}] latency p50/p99 {p50:.2f}/{p99:.2f} ms, "
                          f"e2e {e50:.2f}/{e99:.2f} ms", flush=True)  # fmt: skip
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    for name, kind, cpu_us in cpu_rows:
        record(name, "us/msg", False, kind, cpu_us)
    for kind, mib in _PEAK_RSS_MIB.items():
        record("broker peak RSS", "MiB", False, kind, mib)
    return list(rows.values())


def _cell(row: Row, broker: str, rounds: int) -> str:
    value = row.median(broker)
    text = f"{value:,.0f}" if row.unit in ("msg/s", "MiB") else f"{value:.2f}"
    spread = row.spread(broker)
    return f"{text} ±{spread / 2:.0f}%" if spread == spread and rounds > 1 else text


def print_table(rows: list[Row], rounds: int) -> None:
    print()
    print(f"Official pulsar-client {pulsar.__version__}, 100-byte messages, medians of {rounds} "
          f"round(s) with the spread (max - min) / median; ratio = {LIKE_FOR_LIKE} vs {LITE} "
          "(> 1: Magnetar better).")  # fmt: skip
    header = (
        f"| {'workload':<52} | {LIKE_FOR_LIKE:>16} | {LITE:>16} | {'ratio':>6} "
        f"| {'magnetar-none':>16} |"
    )
    print(header)
    print("|" + "|".join("-" * len(col) for col in header.split("|")[1:-1]) + "|")
    for row in rows:
        print(
            f"| {row.name + ' (' + row.unit + ')':<52} | {_cell(row, LIKE_FOR_LIKE, rounds):>16} "
            f"| {_cell(row, LITE, rounds):>16} | {row.ratio():>6.2f} "
            f"| {_cell(row, 'magnetar-none', rounds):>16} |"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of the message counts")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--only",
        choices=("classic", "speed"),
        help="classic: the rows above; speed: issue 48's workloads A-D (default: both)",
    )
    parser.add_argument(
        "--speed-rounds", type=int, default=5, help="rounds of the workloads A-D (default 5)"
    )
    parser.add_argument(
        "--workloads", default="A,B,C,D", help="which of A-D to run (comma-separated)"
    )
    args = parser.parse_args(argv)
    if args.only != "speed":
        rows = run(args.scale, args.rounds)
        print_table(rows, args.rounds)
    if args.only != "classic":
        from bench import speed

        workdir = Path(tempfile.mkdtemp(prefix="magnetar-speed-"))
        try:
            chosen = tuple(w.strip().upper() for w in args.workloads.split(",") if w.strip())
            rows = speed.run(args.scale, args.speed_rounds, workdir, chosen)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        print_table([r for r in rows if "disk" not in r.samples], args.speed_rounds)
        for line in speed.verdict(rows):
            print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
