"""`magnetar perf produce|consume`, like pulsar-perf, through our client:
rate control, message size, batching, a line every --interval seconds
(msg/s, MB/s, latency percentiles from an HDR histogram) and a summary."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import click
from hdrh.histogram import HdrHistogram

from magnetar import client as pulsar
from magnetar.client.cli.connection import Connection, connection_options
from magnetar.client.cli.names import topic_argument

# Latencies are recorded in microseconds, up to a minute, 3 significant digits.
_MAX_US = 60_000_000


class Meter:
    """Counts and latencies for one interval and for the whole run."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.started = time.monotonic()
        self.total_msgs = 0
        self.total_bytes = 0
        self.failed = 0
        self.total = HdrHistogram(1, _MAX_US, 3)
        self._reset()

    def _reset(self) -> None:
        self.msgs = 0
        self.bytes = 0
        self.interval = HdrHistogram(1, _MAX_US, 3)
        self.since = time.monotonic()

    def record(self, size: int, latency_s: float | None) -> None:
        with self._lock:
            self.msgs += 1
            self.bytes += size
            self.total_msgs += 1
            self.total_bytes += size
            if latency_s is not None:
                micros = min(max(1, int(latency_s * 1e6)), _MAX_US)
                self.interval.record_value(micros)
                self.total.record_value(micros)

    def line(self, what: str) -> str:
        with self._lock:
            elapsed = max(time.monotonic() - self.since, 1e-9)
            text = _describe(what, self.msgs, self.bytes, elapsed, self.interval)
            self._reset()
        return text

    def record_failure(self) -> None:
        with self._lock:
            self.failed += 1

    def summary(self, what: str) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        text = "summary: " + _describe(what, self.total_msgs, self.total_bytes, elapsed, self.total)
        return text + (f" failed {self.failed}" if self.failed else "")


def _describe(what: str, msgs: int, size: int, elapsed: float, hist: Any) -> str:
    text = f"{what} {msgs / elapsed:.1f} msg/s {size / elapsed / 1e6:.3f} MB/s"
    if hist.get_total_count():
        ms = [hist.get_value_at_percentile(p) / 1000 for p in (50, 95, 99)]
        text += (
            f" latency ms p50 {ms[0]:.3f} p95 {ms[1]:.3f} p99 {ms[2]:.3f}"
            f" max {hist.get_max_value() / 1000:.3f}"
        )
    return text


def _report(meter: Meter, what: str, interval: float, done: threading.Event) -> threading.Thread:
    def run() -> None:
        while not done.wait(interval):
            click.echo(meter.line(what))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@contextlib.contextmanager
def until_interrupted() -> Iterator[threading.Event]:
    """An event set by Ctrl-C (SIGINT), the way an open-ended run ends. A
    flag, not KeyboardInterrupt: the exception could land inside a client
    call (and be lost there, or leave it half done); the loops check the flag."""
    stop = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda _sig, _frame: stop.set())
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, previous)


_INTERVAL = click.option("--interval", default=10.0, show_default=True, help="Seconds per line.")


@click.group()
def perf() -> None:
    """Load generators (like pulsar-perf)."""


@perf.command("produce")
@topic_argument
@click.option("--rate", "-r", default=100.0, show_default=True, help="msg/s; 0: unlimited.")
@click.option("--size", "-s", default=1024, show_default=True, help="Message bytes.")
@click.option("--num-messages", "-m", default=0, show_default=True, help="0: until interrupted.")
@click.option("--batching/--no-batching", default=True, show_default=True)
@_INTERVAL
@connection_options("client")
def perf_produce(
    topic: str,
    rate: float,
    size: int,
    num_messages: int,
    batching: bool,
    interval: float,
    connection: Connection,
) -> None:
    """Publish at a fixed rate; latency is send to receipt."""
    client = connection.client()
    meter, done = Meter(), threading.Event()
    try:
        producer = client.create_producer(topic, batching_enabled=batching)
        reporter = _report(meter, "produced", interval, done)
        payload = b"m" * size
        start, sent = time.monotonic(), 0
        # Ctrl-C ends the run and still prints the summary.
        with until_interrupted() as stop:
            while (num_messages == 0 or sent < num_messages) and not stop.is_set():
                if rate > 0:
                    wait = start + sent / rate - time.monotonic()
                    if wait > 0:
                        stop.wait(wait)
                        continue
                began = time.monotonic()
                producer.send_async(payload, _on_sent(meter, size, began))
                sent += 1
        with contextlib.suppress(KeyboardInterrupt):
            producer.flush()
        producer.close()
        done.set()
        reporter.join()
        click.echo(meter.summary("produced"))
    finally:
        client.close()


def _on_sent(meter: Meter, size: int, began: float) -> Callable[[Any, Any], None]:
    def callback(result: Any, _message_id: Any) -> None:
        if result == pulsar.Result.Ok:
            meter.record(size, time.monotonic() - began)
        else:
            meter.record_failure()

    return callback


@perf.command("consume")
@topic_argument
@click.option("--subscription", "-s", default="perf", show_default=True)
@click.option("--num-messages", "-m", default=0, show_default=True, help="0: until interrupted.")
@_INTERVAL
@connection_options("client")
def perf_consume(
    topic: str, subscription: str, num_messages: int, interval: float, connection: Connection
) -> None:
    """Receive and acknowledge; latency is publish time to receipt."""
    client = connection.client()
    meter, done = Meter(), threading.Event()
    try:
        consumer = client.subscribe(topic, subscription, consumer_type=pulsar.ConsumerType.Shared)
        reporter = _report(meter, "consumed", interval, done)
        received = 0
        with until_interrupted() as stop:
            while (num_messages == 0 or received < num_messages) and not stop.is_set():
                try:
                    message = consumer.receive(timeout_millis=200)
                except pulsar.Timeout:
                    continue  # to look at the flag
                latency = time.time() - message.publish_timestamp() / 1000
                meter.record(len(message.data()), max(latency, 0.0))
                consumer.acknowledge(message)
                received += 1
        consumer.close()
        done.set()
        reporter.join()
        click.echo(meter.summary("consumed"))
    finally:
        client.close()
