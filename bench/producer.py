"""Producer throughput: Magnetar's client next to the official one, same broker.

`python -m bench producer [--messages N] [--size BYTES] [--rounds R]`

Starts a pulsar-lite broker (a subprocess on a free loopback port, fresh data
directory, metrics endpoint off), then for each client and mode publishes N
messages of SIZE bytes with `send_async` (no per-message callback) and one
`flush()` at the end, and reports messages per second (best of R rounds).

Rows: the official client (`pulsar-client`, C++ core), our blocking facade
(`magnetar.client`, the same calls) and our async core (`magnetar.client.aio`,
`send_async` on its own loop), each batched (1000 messages / 128 KiB / 10 ms)
and not batched; the `+cb` rows pass a per-message callback that counts
answers (ratios against the official client with a callback). The target is
our batched facade at >= 0.5x the official client batched.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

TARGET_RATIO = 0.5


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def pulsar_lite(workdir: Path) -> Iterator[str]:
    """A pulsar-lite broker for the duration of the block; yields its URL."""
    import pulsar_lite

    binary = Path(pulsar_lite.__file__).parent / "bin" / "pulsar-lite"
    port = _free_port()
    config = workdir / "pulsar-lite.toml"
    config.write_text("[metrics]\nenabled = false\n")
    log = (workdir / "pulsar-lite.log").open("wb")
    proc = subprocess.Popen(
        [str(binary), "--config", str(config), "--addr", f"127.0.0.1:{port}",
         "--db-path", str(workdir / "db"), "--log-level", "warn"],
        stdout=log, stderr=log, cwd=workdir,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"pulsar-lite exited with {proc.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("pulsar-lite did not listen in time") from None
                time.sleep(0.05)
        yield f"pulsar://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _producer_options(batched: bool) -> dict[str, Any]:
    return {
        "batching_enabled": batched,
        "block_if_queue_full": True,
        "max_pending_messages": 5000,
        "batching_max_messages": 1000,
        "batching_max_allowed_size_in_bytes": 128 * 1024,
        "batching_max_publish_delay_ms": 10,
    }


class _Counter:
    """A per-message callback that counts answers (what applications usually pass)."""

    def __init__(self) -> None:
        self.ok = 0

    def __call__(self, result: Any, msg_id: Any) -> None:
        self.ok += 1


def _run_blocking(
    client: Any, topic: str, count: int, payload: bytes, batched: bool, callback: bool
) -> float:
    """Timed send_async loop through a blocking client shaped like `pulsar.Client`."""
    try:
        producer = client.create_producer(topic, **_producer_options(batched))
        counter = _Counter() if callback else None
        start = time.perf_counter()
        for _ in range(count):
            producer.send_async(payload, counter)
        producer.flush()
        elapsed = time.perf_counter() - start
        producer.close()
    finally:
        client.close()
    assert counter is None or counter.ok == count
    return count / elapsed


def run_official(
    url: str, topic: str, count: int, payload: bytes, batched: bool, callback: bool = False
) -> float:
    import pulsar

    client = pulsar.Client(
        url, operation_timeout_seconds=10, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
    )
    return _run_blocking(client, topic, count, payload, batched, callback)


def run_facade(
    url: str, topic: str, count: int, payload: bytes, batched: bool, callback: bool = False
) -> float:
    from magnetar import client as magnetar_client

    client = magnetar_client.Client(url, operation_timeout_seconds=10)
    return _run_blocking(client, topic, count, payload, batched, callback)


def run_aio(url: str, topic: str, count: int, payload: bytes, batched: bool) -> float:
    from magnetar.client.aio import Client, OutgoingMessage, ProducerConfiguration
    from magnetar.client.sync.loop import new_event_loop

    async def go() -> float:
        async with Client(url, operation_timeout_seconds=10) as client:
            conf = ProducerConfiguration(**_producer_options(batched))
            producer = await client.create_producer(topic, conf)
            start = time.perf_counter()
            for _ in range(count):
                if not producer.has_capacity():
                    await producer.wait_for_capacity()
                producer.send_async(OutgoingMessage(payload), None)
            await producer.flush()
            elapsed = time.perf_counter() - start
            await producer.close()
            return count / elapsed

    loop = new_event_loop()
    try:
        return loop.run_until_complete(go())
    finally:
        loop.close()


RUNNERS: dict[str, Callable[[str, str, int, bytes, bool], float]] = {
    "official": run_official,
    "magnetar": run_facade,
    "magnetar.aio": run_aio,
    "official+cb": functools.partial(run_official, callback=True),
    "magnetar+cb": functools.partial(run_facade, callback=True),
}


def measure(url: str, count: int, size: int, rounds: int) -> dict[tuple[str, bool], float]:
    payload = b"x" * size
    best: dict[tuple[str, bool], float] = {}
    for round_no in range(rounds):
        for batched in (True, False):
            n = count if batched else max(count // 5, 1000)
            for name, runner in RUNNERS.items():
                label = name.replace("+", "-")
                topic = f"bench-producer-{label}-{batched}-{round_no}-{time.time_ns()}"
                rate = runner(url, topic, n, payload, batched)
                key = (name, batched)
                best[key] = max(best.get(key, 0.0), rate)
    return best


def report(best: dict[tuple[str, bool], float], size: int) -> str:
    lines = [
        f"producer throughput, {size}-byte messages, pulsar-lite broker (msg/s, best of rounds)"
    ]
    lines.append("ratio: against the official client (official+cb for the +cb rows)")
    lines.append(f"{'client':<14}{'batched':>12}{'ratio':>8}{'not batched':>14}{'ratio':>8}")
    official_b = best[("official", True)]
    for name in RUNNERS:
        # Rows with a callback compare with the official client with a callback.
        base = "official+cb" if name.endswith("+cb") else "official"
        b = best[(name, True)]
        s = best[(name, False)]
        ratio_b = b / best[(base, True)]
        ratio_s = s / best[(base, False)]
        lines.append(f"{name:<14}{b:>12,.0f}{ratio_b:>8.2f}{s:>14,.0f}{ratio_s:>8.2f}")
    ratio = best[("magnetar", True)] / official_b
    verdict = "meets" if ratio >= TARGET_RATIO else "MISSES"
    lines.append(
        f"magnetar batched / official batched = {ratio:.2f} ({verdict} the {TARGET_RATIO}x target)"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench producer", description=__doc__)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    args, _unknown = parser.parse_known_args(argv)
    with (
        tempfile.TemporaryDirectory(prefix="bench-producer-") as tmp,
        pulsar_lite(Path(tmp)) as url,
    ):
        best = measure(url, args.messages, args.size, args.rounds)
    print(report(best, args.size))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
