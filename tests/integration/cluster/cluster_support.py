"""Cluster test support: broker processes (`magnetar-broker cluster`) on
free loopback ports, sharing one etcd and one data directory."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.integration.broker.harness import free_port, http_call

TIMEOUT = 20.0


class ClusterBroker:
    """One broker process of a cluster; SIGKILL, SIGSTOP and SIGCONT as needed."""

    def __init__(self, etcd_url: str, data_dir: Path, log_path: Path, **settings: object) -> None:
        self.etcd_url = etcd_url
        self.data_dir = data_dir
        self.log_path = log_path
        self.port = free_port()
        self.http_port = free_port()
        self.env = {
            **os.environ,
            **{f"MAGNETAR_{key.upper()}": str(value) for key, value in settings.items()},
        }
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    @property
    def broker_id(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def start(self) -> ClusterBroker:
        command = [
            sys.executable,
            "-m",
            "magnetar.broker",
            "cluster",
            "--metadata-url",
            self.etcd_url,
            "--port",
            str(self.port),
            "--http-port",
            str(self.http_port),
            "--data-dir",
            str(self.data_dir),
        ]
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(command, stdout=log, stderr=log, env=self.env)
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"broker exited with {self.proc.returncode}; see {self.log_path}"
                )
            try:
                with urllib.request.urlopen(f"{self.http_url}/admin/v2/brokers/x", timeout=1):
                    pass
                if self.broker_id in self.brokers():
                    return self
            except OSError:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"broker did not join the cluster; see {self.log_path}")

    def brokers(self) -> list[str]:
        status, body = http_call("GET", f"{self.http_url}/admin/v2/brokers/standalone")
        assert status == 200, body
        return list(body)

    def ownership(self) -> dict[str, Any]:
        status, body = http_call("GET", f"{self.http_url}/admin/v2/broker-stats/ownership")
        assert status == 200, body
        return dict(body)

    def signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()


def wait_until(check: Callable[[], bool], timeout: float = TIMEOUT, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what or check}")
        time.sleep(0.05)


def log_lines(path: Path, event: str) -> list[dict[str, Any]]:
    """The broker's JSON log lines with this event."""
    found = []
    for line in path.read_text().splitlines():
        if event in line:
            try:
                found.append(json.loads(line))
            except ValueError:
                continue
    return found
