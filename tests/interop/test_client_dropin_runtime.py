"""Our client as a drop-in for `pulsar` (issue 26, item 4): the run-time
behaviour the official module has besides producing and consuming, checked
against pulsar-lite and our broker: `logger=` objects, a client dropped
without close(), a signal during a blocking receive, and the `_pulsar`
compatibility module."""

from __future__ import annotations

import gc
import logging
import os
import signal
import threading
import time
from pathlib import Path

import pytest

import magnetar.client as pulsar
from magnetar.client import _pulsar
from tests.interop.conftest import BrokerUnderTest


def _threads_named(prefix: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(prefix)]


def test_console_and_file_loggers_receive_the_clients_lines(
    broker: BrokerUnderTest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """pulsar.ConsoleLogger / FileLogger: a client's log lines at the level
    and above go to standard output / the file while it is open, and stop
    when it closes."""
    log_file = tmp_path / "client.log"
    topic = broker.topic("loggers")
    client = pulsar.Client(
        broker.url, logger=pulsar.FileLogger(pulsar.LoggerLevel.Debug, str(log_file))
    )
    client.create_producer(topic).send(b"hello")
    client.close()
    written = log_file.read_text()
    assert "magnetar.client" in written and "DEBUG" in written
    size = log_file.stat().st_size
    other = pulsar.Client(broker.url)  # no logger: nothing more in the file
    other.create_producer(topic).send(b"again")
    other.close()
    assert log_file.stat().st_size == size

    capsys.readouterr()
    console = pulsar.Client(broker.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Debug))
    console.create_producer(topic).send(b"console")
    console.close()
    assert "magnetar.client" in capsys.readouterr().out
    with pytest.raises(pulsar.InvalidConfiguration):
        pulsar.Client(broker.url, logger="not a logger")


def test_a_stdlib_logger_gets_records_at_its_level(broker: BrokerUnderTest) -> None:
    """Client(logger=logging.Logger): records the logger is enabled for are
    handed to it; a logger at ERROR gets no debug lines."""
    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    app = logging.getLogger(f"app-{os.getpid()}-{time.monotonic_ns()}")
    app.propagate = False
    app.addHandler(Keep())
    app.setLevel(logging.ERROR)
    client = pulsar.Client(broker.url, logger=app)
    client.create_producer(broker.topic("stdlib-logger")).send(b"x")
    client.close()
    assert not [r for r in seen if r.levelno < logging.ERROR]
    app.setLevel(logging.DEBUG)
    client = pulsar.Client(broker.url, logger=app)
    client.create_producer(broker.topic("stdlib-logger")).send(b"x")
    client.close()
    assert any(r.name.startswith("magnetar.client") for r in seen)


def test_a_client_dropped_without_close_leaves_no_thread(broker: BrokerUnderTest) -> None:
    """As the official client: a Client that goes out of scope unclosed
    closes its connections and its thread ends (custom_logger_test's
    thread-leak check)."""
    before = set(_threads_named("magnetar-client"))

    def use_and_drop() -> set[threading.Thread]:
        client = pulsar.Client(broker.url, operation_timeout_seconds=5)
        assert client.get_topic_partitions(broker.topic("dropped"))
        return set(_threads_named("magnetar-client")) - before

    started = use_and_drop()
    assert started, "the client runs a thread of its own"
    gc.collect()
    for thread in started:
        thread.join(10)
    assert not [t for t in started if t.is_alive()]


@pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(),
    reason="Python runs signal handlers in the main thread only",
)
def test_sigint_during_receive_raises_interrupted(broker: BrokerUnderTest) -> None:
    """A SIGINT while receive() waits ends it with pulsar.Interrupted (the
    official client's behaviour, interrupted_test.py), not a hang."""
    client = pulsar.Client(broker.url)
    try:
        consumer = client.subscribe(broker.topic("sigint"), "sub")
        timer = threading.Timer(0.3, signal.raise_signal, (signal.SIGINT,))
        started = time.monotonic()
        timer.start()
        with pytest.raises(pulsar.Interrupted):
            consumer.receive()
        assert 0.2 < time.monotonic() - started < 5
    finally:
        client.close()


def test_pulsar_compat_configuration_objects() -> None:
    """`_pulsar`'s configuration objects read and set like the binding's,
    with its defaults (pulsar_test.py test_producer_config and
    test_consumer_config)."""
    conf = _pulsar.ProducerConfiguration()
    assert conf.send_timeout_millis() == 30000
    assert conf.send_timeout_millis(12) is conf
    assert conf.send_timeout_millis() == 12
    assert conf.compression_type() == pulsar.CompressionType.NONE
    consumer = _pulsar.ConsumerConfiguration()
    assert consumer.consumer_type() == pulsar.ConsumerType.Exclusive
    assert consumer.consumer_name() == ""
    consumer.replicate_subscription_state_enabled(True)
    assert consumer.replicate_subscription_state_enabled() is True
    with pytest.raises(AttributeError):
        consumer.no_such_option()
    assert _pulsar.MessageId is pulsar.MessageId
    assert int(_pulsar.Result.Ok) == 0
