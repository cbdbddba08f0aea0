"""How much a consumer holds before it receives anything (`python -m bench prefetch`).

The setting of `bench compare`'s "consume exclusive subscribed first" row: an
Exclusive consumer of the official client (receiver queue 1,000) subscribes,
then 300,000 x 100 B are produced batched (1,000 / 5 ms) on the same client.
Then the broker process is stopped (SIGSTOP) and the consumer drains what
it already has. Permits count messages (SEMANTICS 2.2), so a broker that
keeps them leaves about one receiver queue (plus one batch over the line)
in the client; whatever more arrived was delivered past the permits, before
the drain's clock starts in that row.
"""

from __future__ import annotations

import argparse
import signal
import tempfile
import time
from pathlib import Path

import pulsar

from bench.compare import (
    LITE,
    PAYLOAD_100B,
    _client,
    _cpu_seconds,
    _producer,
    cpu_quiet,
    start_broker,
)

RECEIVER_QUEUE = 1000


def _wait_until_idle(pid: int, quiet_polls: int = 5, poll_s: float = 0.05) -> None:
    """Until the broker process stops working: what it is going to send, it
    has sent. Neither broker signals that (and the official client shows no
    queue length), so its CPU time is watched: next to none used in
    ``quiet_polls`` polls in a row (compare.cpu_quiet), at most 30 s."""
    deadline = time.monotonic() + 30.0
    last = _cpu_seconds(pid)
    quiet = 0
    while quiet < quiet_polls and time.monotonic() < deadline:
        time.sleep(poll_s)
        now = _cpu_seconds(pid)
        quiet = quiet + 1 if cpu_quiet(last, now, poll_s) else 0
        last = now


def held_before_receiving(kind: str, workdir: Path, count: int) -> int:
    """Messages the consumer can take with the broker stopped."""
    with start_broker(kind, workdir) as broker:
        client = _client(broker.url)
        try:
            consumer = client.subscribe(
                "prefetch",
                "bench-prefetch",
                consumer_type=pulsar.ConsumerType.Exclusive,
                receiver_queue_size=RECEIVER_QUEUE,
                batch_receive_policy=pulsar.ConsumerBatchReceivePolicy(1000, 0, 100),
            )
            producer = _producer(client, "prefetch", batched=True)
            for _ in range(count):
                producer.send_async(PAYLOAD_100B, None)
            producer.flush()
            _wait_until_idle(broker.proc.pid)
            broker.proc.send_signal(signal.SIGSTOP)
            try:
                held = 0
                while batch := consumer.batch_receive():  # [] after 100 ms without
                    held += len(batch)
            finally:
                broker.proc.send_signal(signal.SIGCONT)
            return held
        finally:
            client.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench prefetch", description=__doc__)
    parser.add_argument("--count", type=int, default=300_000)
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="magnetar-prefetch-"))
    print(f"receiver queue {RECEIVER_QUEUE}, {args.count:,} messages produced")
    for kind in ("magnetar-fsync", LITE):
        held = held_before_receiving(kind, workdir / kind, args.count)
        print(f"  {kind}: {held:,} messages held before the first receive")
    return 0
