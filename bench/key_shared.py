"""Key_Shared vs Shared dispatch throughput (`python -m bench key_shared`).

One Magnetar broker (subprocess, fsync, loopback); per round a topic gets
`count` unbatched 100-byte messages over 1,000 partition keys from the
official client, then two subscriptions on it are drained, one Shared and
one Key_Shared (which goes first alternates by round), each by 3 official-
client consumers in their own threads (batch_receive, then an individual
ack per message). Figures are msg/s from the first receive to the last and
the broker's CPU time per message meanwhile (what dispatch costs it, whoever
is the bottleneck), medians of the rounds; the ratio Key_Shared / Shared is
the issue's target (>= 0.8).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pulsar

from bench.compare import PAYLOAD_100B, _client, _cpu_seconds, start_broker

CONSUMERS = 3
KEYS = 1000
_KEY_SHARED = pulsar.ConsumerType.KeyShared


def _produce(url: str, topic: str, count: int) -> None:
    client = _client(url)
    try:
        # Both subscriptions exist before the first message, from the start.
        for sub, sub_type in (("shared", pulsar.ConsumerType.Shared), ("ks", _KEY_SHARED)):
            client.subscribe(topic, sub, consumer_type=sub_type).close()
        producer = client.create_producer(
            topic, batching_enabled=False, max_pending_messages=5000, block_if_queue_full=True
        )
        keys = [f"key-{i}" for i in range(KEYS)]
        for i in range(count):
            producer.send_async(PAYLOAD_100B, None, partition_key=keys[i % KEYS])
        producer.flush()
        producer.close()
    finally:
        client.close()


def drain(url: str, pid: int, topic: str, count: int, key_shared: bool) -> tuple[float, float]:
    """msg/s for 3 consumers receiving and acking `count` messages between
    them, and the broker's CPU µs per message meanwhile."""
    client = _client(url)
    sub, sub_type = ("ks", _KEY_SHARED) if key_shared else ("shared", pulsar.ConsumerType.Shared)
    try:
        consumers = [
            client.subscribe(
                topic,
                sub,
                consumer_type=sub_type,
                consumer_name=f"c{i}",
                batch_receive_policy=pulsar.ConsumerBatchReceivePolicy(1000, 0, 100),
            )
            for i in range(CONSUMERS)
        ]
        lock = threading.Lock()
        received = [0]
        first: list[float] = []
        done = threading.Event()

        def run(consumer: Any) -> None:
            while not done.is_set():
                batch = consumer.batch_receive()
                for msg in batch:
                    consumer.acknowledge(msg)
                if not len(batch):
                    continue
                with lock:
                    if not first:
                        first.append(time.perf_counter())
                    received[0] += len(batch)
                    if received[0] >= count:
                        done.set()

        threads = [threading.Thread(target=run, args=(c,)) for c in consumers]
        cpu_before = _cpu_seconds(pid)
        for thread in threads:
            thread.start()
        finished = done.wait(300)
        end = time.perf_counter()
        cpu = _cpu_seconds(pid) - cpu_before
        done.set()
        for thread in threads:
            thread.join()
        if not finished:
            raise RuntimeError(f"only {received[0]} of {count} messages arrived")
        return count / (end - first[0]), cpu / count * 1e6
    finally:
        client.close()


def run(count: int, rounds: int) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    workdir = Path(tempfile.mkdtemp(prefix="magnetar-bench-ks-"))
    results: dict[str, list[float]] = {"Shared": [], "Key_Shared": []}
    cpu: dict[str, list[float]] = {"Shared": [], "Key_Shared": []}
    try:
        with start_broker("magnetar-fsync", workdir) as broker:
            for rnd in range(rounds):
                topic = f"persistent://public/default/ks-bench-{rnd}"
                _produce(broker.url, topic, count)
                order = [False, True] if rnd % 2 == 0 else [True, False]
                for key_shared in order:
                    rate, us = drain(broker.url, broker.proc.pid, topic, count, key_shared)
                    name = "Key_Shared" if key_shared else "Shared"
                    results[name].append(rate)
                    cpu[name].append(us)
                    print(f"  [round {rnd}] {name}: {rate:,.0f} msg/s, broker {us:.1f} µs/msg",
                          flush=True)  # fmt: skip
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return results, cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of the message count")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    count = max(int(60_000 * args.scale), CONSUMERS * KEYS)
    results, cpu = run(count, args.rounds)
    shared = statistics.median(results["Shared"])
    key_shared = statistics.median(results["Key_Shared"])
    shared_cpu = statistics.median(cpu["Shared"])
    key_shared_cpu = statistics.median(cpu["Key_Shared"])
    print()
    print(
        f"Dispatch, {CONSUMERS} official-client consumers (batch_receive, ack each), "
        f"{KEYS:,} keys, {count:,} unbatched 100-byte messages, medians of {args.rounds} round(s):"
    )
    print(f"| {'subscription':<12} | {'msg/s':>10} | {'broker CPU µs/msg':>17} |")
    print(f"|{'-' * 14}|{'-' * 12}|{'-' * 19}|")
    print(f"| {'Shared':<12} | {shared:>10,.0f} | {shared_cpu:>17.1f} |")
    print(f"| {'Key_Shared':<12} | {key_shared:>10,.0f} | {key_shared_cpu:>17.1f} |")
    print(f"Key_Shared / Shared = {key_shared / shared:.2f} (target >= 0.80)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
