"""Topics by the thousand: Magnetar vs pulsar-lite (`python -m bench scale`).

The official client, one process, 100-byte messages. First, on each round's
fresh broker, "first topic of a fresh broker": once the broker listens and
has been idle for 0.2 s (its CPU time still; start-up finished), the time
from a new client (not yet connected; in a process of its own) to its first
producer on a new topic: TCP connect, CONNECT, PARTITIONED_METADATA, LOOKUP
and PRODUCER, with whatever the broker does on its first topic. Then for each topic count N:
N producers on new topics (the time to create them gives "topics/s"), then
30,000 messages sent round-robin over them with `send_async(payload, None)`
and a `flush()` of each producer (unbatched: `max_pending_messages=2000`,
`block_if_queue_full`; batched: 1,000 messages / 5 ms); `--creation-only`
times the creation alone (no sends, no batched pass). Also a consume row
(1,000 topics, a Shared consumer on each, 30 messages per topic, receive and
acknowledge each) and, with `--restart N`, Magnetar alone: N topics holding one
message each, a restart, the time to the first answered LOOKUP and the peak RSS.

Brokers alternate within each round; the table gives medians over the rounds
and the ratio magnetar / pulsar-lite (the two as shipped: Magnetar fsyncs
before a receipt, pulsar-lite does not). "open files" is the broker's count
of file descriptors while its N producers are still connected.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import pulsar

from bench.compare import (
    LIKE_FOR_LIKE,
    LITE,
    PAYLOAD_100B,
    Row,
    _client,
    _cpu_seconds,
    _free_port,
    _peak_rss_mib,
    _producer,
    _wait_for_port,
    cpu_quiet,
    start_broker,
)

MESSAGES = 30_000
# Where `python -m bench.scale` runs from (the first-topic probe).
_REPO = Path(__file__).resolve().parents[1]
# The restart row's topics are filled by this many threads of one client
# (one by one, 100,000 topics took 630 s).
FILL_THREADS = 4
BROKERS = (LIKE_FOR_LIKE, LITE)


def _open_files(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def _producers(client: pulsar.Client, prefix: str, n: int, batched: bool) -> list[Any]:
    return [_producer(client, f"{prefix}-{i}", batched, max_pending=2000) for i in range(n)]


def wait_idle(pid: int, quiet_s: float = 0.2, timeout_s: float = 10.0) -> None:
    """Until the process used next to no CPU for `quiet_s` (its start-up is
    over: a broker may listen before it has finished starting)."""
    deadline = time.monotonic() + timeout_s
    last = _cpu_seconds(pid)
    while time.monotonic() < deadline:
        time.sleep(quiet_s)
        now = _cpu_seconds(pid)
        if cpu_quiet(last, now, quiet_s):
            return
        last = now


def first_topic_ms(url: str, pid: int) -> float:
    """Milliseconds from a new client to its first producer on a new topic,
    on a broker that has served nothing yet (see the module docstring). The
    client runs in a process of its own: in this one, after the produce rows
    of a round, a new client took 10 ms more to connect to either broker."""
    wait_idle(pid)
    probe = [sys.executable, "-m", "bench.scale", "--first-topic-probe", url]
    out = subprocess.run(probe, capture_output=True, text=True, check=True, cwd=_REPO)
    return float(out.stdout.split()[-1])


def _first_topic_probe(url: str) -> None:
    client = _client(url)
    try:
        started = time.perf_counter()
        producer = _producer(client, "first-topic", False, max_pending=2000)
        elapsed = time.perf_counter() - started
        producer.close()
    finally:
        client.close()
    print(f"{elapsed * 1000:.3f}")


def produce_over(
    url: str, pid: int, prefix: str, topics: int, batched: bool, sends: bool = True
) -> tuple[float, float, float, int]:
    """(topics created/s, msg/s, broker CPU us/msg, open files) for one row;
    without `sends`, only the first is measured (the others are nan)."""
    client = _client(url)
    try:
        started = time.perf_counter()
        producers = _producers(client, prefix, topics, batched)
        created = topics / (time.perf_counter() - started)
        if not sends:
            for producer in producers:
                producer.close()
            return created, float("nan"), float("nan"), -1
        cpu = _cpu_seconds(pid)
        start = time.perf_counter()
        for i in range(MESSAGES):
            producers[i % topics].send_async(PAYLOAD_100B, None)
        for producer in producers:
            producer.flush()
        elapsed = time.perf_counter() - start
        cpu_us = (_cpu_seconds(pid) - cpu) / MESSAGES * 1e6
        fds = _open_files(pid)
        for producer in producers:
            producer.close()
        return created, MESSAGES / elapsed, cpu_us, fds
    finally:
        client.close()


def consume_over(url: str, prefix: str, topics: int, per_topic: int) -> float:
    """msg/s receiving and acknowledging `per_topic` messages on each of
    `topics` Shared consumers of one client (produced beforehand); nan when
    a receive waited 30 s for nothing."""
    client = _client(url)
    try:
        consumers = [
            client.subscribe(
                f"{prefix}-{i}",
                "scale",
                consumer_type=pulsar.ConsumerType.Shared,
                initial_position=pulsar.InitialPosition.Earliest,
            )
            for i in range(topics)
        ]
        producers = _producers(client, prefix, topics, True)
        for producer in producers:
            for _ in range(per_topic):
                producer.send_async(PAYLOAD_100B, None)
        for producer in producers:
            producer.flush()
            producer.close()
        start = time.perf_counter()
        received = 0
        try:
            for consumer in consumers:
                for _ in range(per_topic):
                    consumer.acknowledge(consumer.receive(timeout_millis=30_000))
                    received += 1
        except pulsar.Timeout:
            # A broker that loses or withholds a message fails its round of
            # this row, not the whole run (seen once from pulsar-lite after
            # its 10,000-topic rows).
            print(f"    consume row: nothing for 30 s after {received:,} of "
                  f"{topics * per_topic:,} messages", flush=True)  # fmt: skip
            return float("nan")
        elapsed = time.perf_counter() - start
        for consumer in consumers:
            consumer.close()
        return topics * per_topic / elapsed
    finally:
        client.close()


def restart(workdir: Path, topics: int) -> dict[str, float]:
    """Magnetar alone: `topics` topics with one message each (kept by a
    subscription), then a restart."""
    # start_broker keeps its data in workdir / kind: the restart reuses it.
    data = workdir / LIKE_FOR_LIKE
    with start_broker(LIKE_FOR_LIKE, workdir) as broker:
        client = _client(broker.url)
        started = time.perf_counter()

        def fill(first: int) -> None:
            for i in range(first, topics, FILL_THREADS):
                # A durable subscription keeps the message (no retention is set).
                client.subscribe(f"restart-{i}", "keep").close()
                producer = client.create_producer(f"restart-{i}", batching_enabled=False)
                producer.send(b"%d" % i)
                producer.close()

        with ThreadPoolExecutor(FILL_THREADS) as pool:
            list(pool.map(fill, range(FILL_THREADS)))
        fill_s = time.perf_counter() - started
        client.close()
    port = _free_port()
    cmd = [sys.executable, "-m", "magnetar.broker", "standalone", "--port", str(port),
           "--http-port", str(_free_port()), "--data-dir", str(data)]  # fmt: skip
    env = {**os.environ, "MAGNETAR_LOG_LEVEL": "warning"}
    log = (workdir / "restart.log").open("wb")
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=log, stderr=log, env=env)
    try:
        _wait_for_port(port, proc, timeout=120)
        client = _client(f"pulsar://127.0.0.1:{port}")
        which = random.randrange(topics)
        reader = client.create_reader(f"restart-{which}", pulsar.MessageId.earliest)
        first_lookup = time.perf_counter() - t0
        msg = reader.read_next(timeout_millis=30_000)
        read_s = time.perf_counter() - t0
        if msg.data() != b"%d" % which:
            raise RuntimeError(f"restart-{which} held {msg.data()!r}")
        client.close()
        rss = _peak_rss_mib(proc.pid)
    except Exception:
        log.flush()
        tail = (workdir / "restart.log").read_text(errors="replace").splitlines()[-20:]
        print("the restarted broker's log ends:", *tail, sep="\n", file=sys.stderr)
        raise
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        log.close()
    return {"fill_s": fill_s, "first_lookup_s": first_lookup, "read_s": read_s, "rss_mib": rss}


def run(
    topic_counts: list[int], rounds: int, consume_topics: int, creation_only: bool = False
) -> list[Row]:
    workdir = Path(tempfile.mkdtemp(prefix="magnetar-scale-"))
    rows: dict[str, Row] = {}

    record = partial(Row.record, rows)

    try:
        for rnd in range(rounds):
            for kind in BROKERS:
                with start_broker(kind, workdir / f"r{rnd}", discard=True) as broker:
                    pid = broker.proc.pid
                    first_ms = first_topic_ms(broker.url, pid)
                    record("first topic of a fresh broker", "ms", False, kind, first_ms)
                    print(f"  [{kind} round {rnd}] first topic of a fresh broker: "
                          f"{first_ms:.2f} ms", flush=True)  # fmt: skip
                    for batched in (False,) if creation_only else (False, True):
                        mode = "batched" if batched else "unbatched"
                        for n in topic_counts:
                            created, rate, cpu_us, fds = produce_over(
                                broker.url, pid, f"{mode[0]}{n}", n, batched, not creation_only
                            )
                            if not batched:
                                record(f"topics created/s ({n:,} new topics)", "topics/s",
                                       True, kind, created)  # fmt: skip
                            if creation_only:
                                print(f"  [{kind} round {rnd}] {n:,} new topics: "
                                      f"{created:,.0f} topics/s", flush=True)  # fmt: skip
                                continue
                            name = f"produce {mode} over {n:,} topics"
                            record(name, "msg/s", True, kind, rate)
                            record(f"broker CPU: {name}", "us/msg", False, kind, cpu_us)
                            record(f"open files: {name}", "fds", False, kind, fds)
                            print(f"  [{kind} round {rnd}] {name}: {rate:,.0f} msg/s, "
                                  f"CPU {cpu_us:.1f} us/msg, {fds} fds, "
                                  f"{created:,.0f} topics/s", flush=True)  # fmt: skip
                    if consume_topics and not creation_only:
                        rate = consume_over(broker.url, "c", consume_topics, 30)
                        name = f"consume {consume_topics:,} topics x 30, Shared, ack each"
                        if not math.isnan(rate):  # a round that timed out leaves no sample
                            record(name, "msg/s", True, kind, rate)
                        print(f"  [{kind} round {rnd}] {name}: {rate:,.0f} msg/s", flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return list(rows.values())


def print_table(rows: list[Row], rounds: int) -> None:
    print()
    print(f"Official pulsar-client {pulsar.__version__}, 100-byte messages, {MESSAGES:,} per "
          f"row, medians of {rounds} round(s); ratio = {LIKE_FOR_LIKE} / {LITE} "
          "(for ms, the inverse: > 1 is Magnetar better in every row).")  # fmt: skip
    header = f"| {'workload':<62} | {LIKE_FOR_LIKE:>14} | {LITE:>14} | {'ratio':>6} |"
    print(header)
    print("|" + "|".join("-" * len(col) for col in header.split("|")[1:-1]) + "|")
    for row in rows:
        mag, lite = row.median(LIKE_FOR_LIKE), row.median(LITE)
        text = f"{row.name} ({row.unit})"
        digits = 2 if row.unit == "ms" else 1
        print(f"| {text:<62} | {mag:>14,.{digits}f} | {lite:>14,.{digits}f} "
              f"| {row.ratio():>6.2f} |")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--topics", default="1,100,1000,10000", help="comma-separated counts")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--consume-topics", type=int, default=1000)
    parser.add_argument("--restart", type=int, default=0, help="topics for the restart row")
    parser.add_argument(
        "--creation-only",
        action="store_true",
        help="time topic creation alone: no sends, no batched pass, no consume row",
    )
    parser.add_argument("--first-topic-probe", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.first_topic_probe:
        _first_topic_probe(args.first_topic_probe)
        return 0
    counts = [int(c) for c in args.topics.split(",") if c]
    rows = run(counts, args.rounds, args.consume_topics, args.creation_only)
    print_table(rows, args.rounds)
    if args.restart:
        with tempfile.TemporaryDirectory(prefix="magnetar-restart-") as tmp:
            got = restart(Path(tmp), args.restart)
        print(f"\nrestart with {args.restart:,} topics of one message: filled in "
              f"{got['fill_s']:.1f} s; first LOOKUP answered {got['first_lookup_s']:.2f} s "
              f"after start, a message read at {got['read_s']:.2f} s; "
              f"peak RSS {got['rss_mib']:,.0f} MiB")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
