"""The daemon as a user runs it: `magnetar-broker standalone` in a subprocess,
structured logs, HTTP health and metrics, graceful exit 0 on SIGTERM."""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.brokers import BrokerThread
from tests.support.official import official_client

CONSOLE_SCRIPT = Path(sys.executable).parent / "magnetar-broker"


def _read_json_lines(proc: subprocess.Popen[bytes], until: str, timeout: float) -> dict[str, Any]:
    """Read JSON log lines from stderr until the event `until`; return that line."""
    assert proc.stderr is not None
    selector = selectors.DefaultSelector()
    selector.register(proc.stderr, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    buffer = b""
    try:
        while time.monotonic() < deadline:
            if not selector.select(max(deadline - time.monotonic(), 0.01)):
                continue
            chunk = os.read(proc.stderr.fileno(), 65536)
            if not chunk:
                break
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                record = json.loads(line)
                if record.get("event") == until:
                    return dict(record)
    finally:
        selector.close()
    raise AssertionError(f"no {until!r} log line (exit code {proc.poll()})")


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], dict[str, Any]]]:
    command = [
        str(CONSOLE_SCRIPT),
        "standalone",
        "--port",
        "0",
        "--http-port",
        "0",
        "--data-dir",
        str(tmp_path / "data"),
        "--log-format",
        "json",
    ]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        started = _read_json_lines(proc, "broker started", timeout=20)
        yield proc, started
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        assert proc.stderr is not None
        proc.stderr.close()


def _get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.status, response.read()


@pytest.mark.official
def test_standalone_serves_and_exits_zero_on_sigterm(
    daemon: tuple[subprocess.Popen[bytes], dict[str, Any]],
) -> None:
    proc, started = daemon
    service_url, http_url = started["service_url"], started["http_url"]
    assert started["level"] == "info"
    status, body = _get(f"{http_url}/admin/v2/brokers/health")
    assert (status, body) == (200, b"ok")
    assert _get(f"{http_url}/status.html") == (200, b"ok")
    with official_client(service_url) as client:
        producer = client.create_producer("daemon-topic")
        consumer = client.subscribe("daemon-topic", "s")
        producer.send(b"hello daemon")
        assert consumer.receive(timeout_millis=5000).data() == b"hello daemon"
        _, metrics = _get(f"{http_url}/metrics")
        assert (
            b'pulsar_in_messages_total{cluster="standalone",namespace="public/default",'
            b'topic="persistent://public/default/daemon-topic"} 1.0'
        ) in metrics
        assert b"pulsar_active_connections 1.0" in metrics
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
    _read_json_lines_after_exit(proc)


def _read_json_lines_after_exit(proc: subprocess.Popen[bytes]) -> None:
    assert proc.stderr is not None
    rest = proc.stderr.read().decode()
    events = [json.loads(line)["event"] for line in rest.splitlines() if line.strip()]
    assert "signal received: shutting down" in events
    assert events[-1] == "broker stopped"


def test_bad_configuration_exits_2(tmp_path: Path) -> None:
    env = dict(os.environ, MAGNETAR_PORT="not-a-port")
    result = subprocess.run(
        [sys.executable, "-m", "magnetar.broker", "standalone", "--data-dir", str(tmp_path)],
        capture_output=True,
        env=env,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    assert b"MAGNETAR_PORT" in result.stderr


def test_health_and_metrics_in_process(broker: BrokerThread) -> None:
    """The metrics registry is per broker: two brokers in one process do not clash."""
    status, body = _get(f"{broker.http_url}/admin/v2/brokers/health")
    assert (status, body) == (200, b"ok")
    _, metrics = _get(f"{broker.http_url}/metrics")
    assert b'pulsar_broker_topics_count{cluster="standalone"}' in metrics
    other = BrokerThread(broker.config.replace(data_dir=broker.config.data_dir / "other"))
    with other:
        assert _get(f"{other.http_url}/status.html") == (200, b"ok")


def test_data_dir_in_use_exits_1(broker: BrokerThread) -> None:
    """A second broker on a data directory in use fails with one clear line."""
    result = subprocess.run(
        [
            str(CONSOLE_SCRIPT),
            "standalone",
            "--port",
            "0",
            "--http-port",
            "0",
            "--data-dir",
            str(broker.config.data_dir),
            "--log-format",
            "json",
        ],
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 1
    lines = [json.loads(line) for line in result.stderr.decode().splitlines() if line.strip()]
    failure = [line for line in lines if line["event"] == "broker failed to start"]
    assert failure and "in use" in failure[0]["error"]


def test_magnetar_points_broker_commands_to_magnetar_broker() -> None:
    """The client's `magnetar` script never loads the broker: `magnetar broker`
    and `magnetar token` fail with a pointer to `magnetar-broker`."""
    script = Path(sys.executable).parent / "magnetar"
    for args, moved in (
        (["broker", "standalone"], "`magnetar-broker`"),
        (["token", "create"], "`magnetar-broker token`"),
    ):
        ran = subprocess.run(
            [str(script), *args], capture_output=True, text=True, timeout=30, check=False
        )
        assert ran.returncode == 2 and moved in ran.stderr, ran.stderr
