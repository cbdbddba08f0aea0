"""Cluster test support: broker processes (`magnetar-broker cluster`) on
free loopback ports, sharing one etcd and one data directory."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

from tests.support.brokers import BrokerProcess
from tests.support.http_calls import http_call

# How long a cluster takes to settle (leases, load reports, moves).
TIMEOUT = 20.0


class ClusterBroker(BrokerProcess):
    """One broker process of a cluster; SIGKILL, SIGSTOP and SIGCONT as needed."""

    mode = "cluster"

    def __init__(self, etcd_url: str, data_dir: Path, log_path: Path, **settings: Any) -> None:
        # Any, not object: broker settings only, never the `ports`/`cwd` keywords.
        super().__init__(data_dir, log_path, **settings)
        self.etcd_url = etcd_url

    @property
    def broker_id(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _extra_args(self) -> list[str]:
        return ["--metadata-url", self.etcd_url]

    def _started(self) -> bool:
        """Serving and registered in the cluster."""
        try:
            status, body = http_call("GET", f"{self.http_url}/admin/v2/brokers/standalone")
        except OSError:  # not listening yet
            return False
        return status == 200 and self.broker_id in body

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
