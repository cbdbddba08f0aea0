"""The broker an official suite runs against, started the way that suite's
CI starts Pulsar: a standalone broker from this checkout on fixed ports
(the suites hard-code them), in the suite's folder so its `test-conf/`
paths resolve, with a fresh data directory and a token secret key made per
run; and the admin calls the suite's set-up script makes, as the superuser.

Shared by `run.py` (apache/pulsar-client-python) and `cpp.py`
(apache/pulsar-client-cpp).
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.brokers import BrokerProcess


@dataclass(frozen=True)
class Ports:
    binary: int = 6650
    http: int = 8080
    tls: int = 6651
    https: int = 8443

    @property
    def admin(self) -> str:
        return f"http://localhost:{self.http}/admin/v2"


def call(ports: Ports, method: str, path: str, body: object, token: str) -> int | str:
    """One admin REST call; the HTTP status, or why there was none."""
    request = urllib.request.Request(
        f"{ports.admin}/{path}", data=json.dumps(body).encode(), method=method
    )
    request.add_header("Content-Type", "application/json")
    request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError as exc:
        return f"failed: {exc}"


def put(ports: Ports, path: str, body: dict[str, object], token: str) -> str:
    """PUT as the suites' scripts do; where the broker made it already at
    start (tenant public, namespace public/default), update it instead, so
    the result is what the script means."""
    status = call(ports, "PUT", path, body, token)
    if status == 409 and path.startswith("tenants/"):
        status = call(ports, "POST", path, body, token)
    elif status == 409 and path.startswith("namespaces/"):
        for role, actions in body["auth_policies"]["namespace_auth"].items():  # type: ignore[index]
            status = call(ports, "POST", f"{path}/permissions/{role}", actions, token)
    return f"HTTP {status}"


def namespace_auth(roles: dict[str, list[str]], **extra: object) -> dict[str, object]:
    """A namespace body as the scripts write it: roles and their actions."""
    return {
        "auth_policies": {"namespace_auth": roles},
        "replication_clusters": ["standalone"],
        **extra,
    }


def cluster_body(ports: Ports) -> dict[str, object]:
    return {
        "serviceUrl": f"http://localhost:{ports.http}/",
        "serviceUrlTls": f"https://localhost:{ports.https}/",
        "brokerServiceUrl": f"pulsar://localhost:{ports.binary}/",
        "brokerServiceUrlTls": f"pulsar+ssl://localhost:{ports.tls}/",
    }


def _magnetar(*args: str) -> list[str]:
    return [sys.executable, "-m", "magnetar.broker", *args]


def create_secret_key(path: Path) -> None:
    subprocess.run(_magnetar("token", "create-secret-key", "--output", str(path)), check=True)


def token(secret_key: Path, subject: str) -> str:
    out = subprocess.run(
        _magnetar("token", "create", "--subject", subject, "--secret-key", str(secret_key)),
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def port_free(port: int) -> bool:
    with contextlib.closing(socket.socket()) as sock:
        # As the broker binds: connections of an earlier run in TIME_WAIT
        # do not make the port busy.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


class SuiteBroker(BrokerProcess):
    """The test harness's broker process, started with a configuration file
    in the suite's folder on the suite's fixed ports."""

    def __init__(self, config: Path, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.config = config

    def _extra_args(self) -> list[str]:
        return ["--config", str(self.config)]


@contextlib.contextmanager
def broker(
    *,
    name: str,
    workdir: Path,
    cwd: Path,
    config: Path,
    ports: Ports,
    secret_key: Path,
    **settings: object,
) -> Iterator[Path]:
    """A standalone broker configured by `config`, started in `cwd`; yields
    its log file once it serves, and stops it on exit."""
    for port in (ports.binary, ports.http, ports.tls, ports.https):
        if not port_free(port):
            raise SystemExit(f"port {port} is in use: stop whatever listens there first")
    process = SuiteBroker(
        config,
        data_dir=workdir / f"{name}-data",
        log_path=workdir / f"{name}.log",
        ports=(ports.binary, ports.http),
        cwd=cwd,
        log_level="info",
        token_secret_key=str(secret_key),
        **settings,
    )
    try:
        process.start()
        yield process.log_path
    finally:
        process.stop()
