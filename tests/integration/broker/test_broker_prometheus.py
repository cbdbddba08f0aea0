"""A real Prometheus server scrapes a broker under load (issue 13): what it
stores for the backlog and the message rate is what the test did.

Debian's `prometheus` package provides the server; the session fixture
installs it when missing (CI runs as root on a fresh machine) and skips only
where it cannot be installed. The test produces at a known pace with nobody
consuming, then asks Prometheus's HTTP query API.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import pytest

from tests.support.brokers import BrokerFactory
from tests.support.official import official_client
from tests.support.ports import free_port

RATE = 200  # messages per second
SECONDS = 8.0
SCRAPE = "1s"
TOPIC = "persistent://public/default/prometheus-load"


@pytest.fixture(scope="session")
def prometheus_binary() -> str:
    """The prometheus executable, installed with apt-get when missing."""
    found = shutil.which("prometheus")
    if found is not None:
        return found
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.skip(
            "prometheus is not installed and cannot be installed here "
            "(installing Debian's `prometheus` package needs root and apt-get)"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "prometheus"],
    ):
        ran = subprocess.run(command, env=env, capture_output=True, timeout=600, check=False)
        if ran.returncode != 0:
            tail = ran.stderr.decode(errors="replace")[-500:]
            pytest.skip(f"installing prometheus failed ({' '.join(command)}): {tail}")
    found = shutil.which("prometheus")
    if found is None:
        pytest.skip("the prometheus package installed no `prometheus` executable on PATH")
    return found


class Prometheus:
    def __init__(self, url: str) -> None:
        self.url = url

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        address = f"{self.url}/api/v1/query?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(address, timeout=10) as response:
            body = json.load(response)
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def value(self, expr: str, at: float | None = None) -> float | None:
        result = self.query(expr, at)
        return float(result[0]["value"][1]) if result else None


@pytest.fixture
def prometheus_for(prometheus_binary: str, tmp_path: Path) -> Iterator[Callable[[int], Prometheus]]:
    """Start a Prometheus scraping the given HTTP port every second; stopped
    and awaited at teardown."""
    procs: list[tuple[subprocess.Popen[bytes], BinaryIO]] = []

    def start(http_port: int) -> Prometheus:
        config = tmp_path / "prometheus.yml"
        config.write_text(
            f"global:\n  scrape_interval: {SCRAPE}\n  evaluation_interval: {SCRAPE}\n"
            "scrape_configs:\n  - job_name: magnetar\n"
            f"    static_configs:\n      - targets: ['127.0.0.1:{http_port}']\n"
        )
        port = free_port()
        log = (tmp_path / "prometheus.log").open("wb")
        proc = subprocess.Popen(
            [
                prometheus_binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=log,
        )
        procs.append((proc, log))
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while True:
            assert proc.poll() is None, (tmp_path / "prometheus.log").read_text()
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as response:
                    if response.status == 200:
                        return Prometheus(url)
            except OSError:
                pass
            assert time.monotonic() < deadline, "prometheus did not become ready"
            time.sleep(0.1)

    yield start
    for proc, log in procs:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _wait_for(prometheus: Prometheus, expr: str, expected: float) -> float | None:
    """The value of `expr` once Prometheus has scraped it equal to `expected`
    (or the last one seen after the deadline)."""
    deadline = time.monotonic() + 10
    value = None
    while time.monotonic() < deadline:
        value = prometheus.value(expr)
        if value == expected:
            break
        time.sleep(0.25)
    return value


@pytest.mark.timeout(700)  # a first run may install the package (apt-get)
def test_prometheus_sees_the_backlog_and_the_rate_produced(
    broker_factory: BrokerFactory, prometheus_for: Callable[[int], Prometheus]
) -> None:
    broker = broker_factory(stats_update_frequency_seconds=1.0)
    http_port = urllib.parse.urlsplit(broker.http_url).port
    assert http_port is not None
    prometheus = prometheus_for(http_port)
    labels = f'topic="{TOPIC}"'
    assert _wait_for(prometheus, 'up{job="magnetar"}', 1.0) == 1.0
    count = int(RATE * SECONDS)
    with official_client(broker.url) as client:
        client.subscribe(TOPIC, "idle").close()  # nobody consumes
        producer = client.create_producer(TOPIC, batching_enabled=False)
        started = time.time()
        for i in range(count):
            pause = started + i / RATE - time.time()
            if pause > 0:
                time.sleep(pause)
            producer.send_async(b"m" * 100, None)
        producer.flush()
        ended = time.time()
    produced_rate = count / (ended - started)

    assert _wait_for(prometheus, f"pulsar_msg_backlog{{{labels}}}", count) == count
    sub = f'{labels},subscription="idle"'
    assert _wait_for(prometheus, f"pulsar_subscription_back_log{{{sub}}}", count) == count
    assert _wait_for(prometheus, f"pulsar_in_messages_total{{{labels}}}", count) == count
    # Over the middle of the run (away from its ramps), both ways of asking
    # for the rate agree with the pace the test kept.
    middle = (started + ended) / 2
    window = f"[{int((ended - started) / 2)}s]"
    counted = prometheus.value(f"rate(pulsar_in_messages_total{{{labels}}}{window})", middle + 2)
    gauge = prometheus.value(f"avg_over_time(pulsar_rate_in{{{labels}}}{window})", middle + 2)
    assert counted is not None and gauge is not None
    assert counted == pytest.approx(produced_rate, rel=0.25)
    assert gauge == pytest.approx(produced_rate, rel=0.25)
