"""Consumer throughput: Magnetar's client next to the official one, on our broker.

`python -m bench consumer [--messages N] [--size BYTES] [--rounds R]`

Starts our broker (a subprocess, sync policy none), pre-produces N messages
(batched) per run on a fresh topic, then times reading them all from the
start in two modes: `receive` + individual `acknowledge` per message, and
`batch_receive` (1000 messages / 10 MiB / 100 ms) + one `acknowledge_cumulative`
per batch. Rows: the official client (`pulsar-client`, C++ core), our
blocking facade (`magnetar.client`, the same calls) and our async core
(`magnetar.client.aio`), each with the receiver queue at 1000. The clients
alternate within each round; the table gives the median of R rounds and the
spread (lowest-highest). The target is the facade at >= 1.0x the official
client in both modes.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.compare import start_broker

TARGET_RATIO = 1.0
BATCH_POLICY = (1000, 10 * 1024 * 1024, 100)


def _fill(url: str, topic: str, count: int, payload: bytes) -> None:
    import pulsar

    client = pulsar.Client(
        url, operation_timeout_seconds=10, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
    )
    try:
        producer = client.create_producer(
            topic, batching_enabled=True, block_if_queue_full=True, max_pending_messages=5000
        )
        for _ in range(count):
            producer.send_async(payload, None)
        producer.flush()
        producer.close()
    finally:
        client.close()


def _drain_blocking(client: Any, topic: str, count: int, batched: bool, policy: Any) -> float:
    try:
        consumer = client.subscribe(
            topic,
            "bench",
            initial_position=client_module(client).InitialPosition.Earliest,
            receiver_queue_size=1000,
            batch_receive_policy=policy,
        )
        received = 0
        start = time.perf_counter()
        if batched:
            while received < count:
                batch = consumer.batch_receive()
                if batch:
                    received += len(batch)
                    consumer.acknowledge_cumulative(batch[-1])
        else:
            while received < count:
                consumer.acknowledge(consumer.receive(10000))
                received += 1
        elapsed = time.perf_counter() - start
        consumer.close()
        return received / elapsed
    finally:
        client.close()


def client_module(client: Any) -> Any:
    import pulsar

    from magnetar import client as magnetar_client

    return pulsar if isinstance(client, pulsar.Client) else magnetar_client


def run_official(url: str, topic: str, count: int, batched: bool) -> float:
    import pulsar

    client = pulsar.Client(
        url, operation_timeout_seconds=10, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
    )
    return _drain_blocking(
        client, topic, count, batched, pulsar.ConsumerBatchReceivePolicy(*BATCH_POLICY)
    )


def run_facade(url: str, topic: str, count: int, batched: bool) -> float:
    from magnetar import client as magnetar_client

    client = magnetar_client.Client(url, operation_timeout_seconds=10)
    return _drain_blocking(
        client, topic, count, batched, magnetar_client.ConsumerBatchReceivePolicy(*BATCH_POLICY)
    )


def run_aio(url: str, topic: str, count: int, batched: bool) -> float:
    from magnetar.client.aio import Client, ConsumerConfiguration, InitialPosition
    from magnetar.client.aio.policies import BatchReceivePolicy
    from magnetar.client.sync.loop import new_event_loop

    async def go() -> float:
        async with Client(url, operation_timeout_seconds=10) as client:
            conf = ConsumerConfiguration(
                initial_position=InitialPosition.Earliest,
                receiver_queue_size=1000,
                batch_receive_policy=BatchReceivePolicy(*BATCH_POLICY),
            )
            consumer = await client.subscribe(topic, "bench", conf)
            received = 0
            start = time.perf_counter()
            if batched:
                while received < count:
                    batch = await consumer.batch_receive()
                    if batch:
                        received += len(batch)
                        consumer.ack_cumulative_nowait(batch[-1])
            else:
                while received < count:
                    consumer.ack_nowait(await consumer.receive(10000))
                    received += 1
            elapsed = time.perf_counter() - start
            await consumer.close()
            return received / elapsed

    loop = new_event_loop()
    try:
        return loop.run_until_complete(go())
    finally:
        loop.close()


RUNNERS: dict[str, Callable[[str, str, int, bool], float]] = {
    "official": run_official,
    "magnetar": run_facade,
    "magnetar.aio": run_aio,
}


Rates = dict[tuple[str, bool], list[float]]


def measure(url: str, count: int, size: int, rounds: int) -> Rates:
    payload = b"x" * size
    rates: Rates = {}
    for round_no in range(rounds):
        for batched in (False, True):
            for name, runner in RUNNERS.items():
                topic = f"bench-consumer-{name}-{batched}-{round_no}-{time.time_ns()}"
                _fill(url, topic, count, payload)
                rates.setdefault((name, batched), []).append(runner(url, topic, count, batched))
    return rates


def report(rates: Rates, size: int, count: int) -> str:
    median = {key: statistics.median(values) for key, values in rates.items()}
    rounds = len(next(iter(rates.values())))
    lines = [
        f"consumer throughput, {count} x {size}-byte messages, our broker, "
        f"msg/s, median of {rounds} rounds (spread lowest-highest)",
        f"{'client':<14}{'receive+ack':>12}{'spread':>18}{'ratio':>7}"
        f"{'batch+cumul':>13}{'spread':>20}{'ratio':>7}",
    ]
    for name in RUNNERS:
        cells = []
        for batched in (False, True):
            values = rates[(name, batched)]
            spread = f"{min(values) / 1000:,.0f}k-{max(values) / 1000:,.0f}k"
            ratio = median[(name, batched)] / median[("official", batched)]
            width = 12 if not batched else 13
            cells.append(f"{median[(name, batched)]:>{width},.0f}{spread:>{18 + 2 * batched}}")
            cells.append(f"{ratio:>7.2f}")
        lines.append(f"{name:<14}" + "".join(cells))
    worst = min(median[("magnetar", b)] / median[("official", b)] for b in (False, True))
    verdict = "meets" if worst >= TARGET_RATIO else "MISSES"
    lines.append(
        f"magnetar facade / official, worse mode = {worst:.2f} ({verdict} {TARGET_RATIO}x)"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench consumer", description=__doc__)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args, _unknown = parser.parse_known_args(argv)
    with (
        tempfile.TemporaryDirectory(prefix="bench-consumer-") as tmp,
        start_broker("magnetar-none", Path(tmp)) as broker,
    ):
        rates = measure(broker.url, args.messages, args.size, args.rounds)
    print(report(rates, args.size, args.messages))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
