"""Real brokers for tests: `BrokerThread` runs a BrokerServer on its own
event loop in a daemon thread, bound to port 0 (or a given port, for restarts
on the same address); the official client blocks its caller, so the broker
must not share the test's thread. `BrokerProcess` runs the daemon in a
subprocess, to be SIGKILLed and started again.
"""

from __future__ import annotations

import asyncio
import base64
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

from magnetar.broker.config import BrokerConfig
from magnetar.broker.server import BrokerServer
from tests.support.ports import free_ports

R = TypeVar("R")
TIMEOUT = 10.0


class BrokerThread:
    """A broker serving from a background thread; `stop()` shuts it down cleanly."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.server: BrokerServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.leaked_tasks: list[str] = []

    @property
    def url(self) -> str:
        assert self.server is not None
        return self.server.service_url

    @property
    def http_url(self) -> str:
        assert self.server is not None
        return self.server.http_url

    @property
    def port(self) -> int:
        assert self.server is not None
        return self.server.port

    def start(self) -> BrokerThread:
        self._ready.clear()
        self._thread = threading.Thread(target=self._run, name="magnetar-broker", daemon=True)
        self._thread.start()
        if not self._ready.wait(TIMEOUT):
            raise TimeoutError("broker did not start")
        if self._error is not None:
            raise self._error
        return self

    def _run(self) -> None:
        loop = _new_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._start())
            self._ready.set()
            loop.run_forever()
        finally:
            self._ready.set()
            # Every task must have had an owner that awaited it during shutdown.
            leftovers = asyncio.all_tasks(loop)
            self.leaked_tasks = [repr(task) for task in leftovers]
            for task in leftovers:
                task.cancel()
            if leftovers:
                loop.run_until_complete(asyncio.gather(*leftovers, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _start(self) -> None:
        self.server = BrokerServer(self.config)
        try:
            await self.server.start()
        except BaseException as exc:
            self._error = exc

    def call(self, coro: Coroutine[Any, Any, R]) -> R:
        """Run a coroutine on the broker's loop and wait for its result."""
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(TIMEOUT)

    def stop(self) -> None:
        if self._loop is None or self._thread is None:
            return
        if self.server is not None and self._error is None:
            self.call(self.server.shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(TIMEOUT)
        assert not self._thread.is_alive(), "broker thread did not stop"
        self._loop = None
        self._thread = None
        assert not self.leaked_tasks, f"tasks left running after shutdown: {self.leaked_tasks}"

    def restart(self, **changes: Any) -> BrokerThread:
        """Stop, then start a new broker on the same data directory and port."""
        port = self.port
        self.stop()
        self.config = self.config.replace(port=port, **changes)
        self.server = None
        return self.start()

    def __enter__(self) -> BrokerThread:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


BrokerFactory = Callable[..., "BrokerThread"]


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


def broker_config(data_dir: Path, **changes: Any) -> BrokerConfig:
    """A test configuration: ephemeral ports, its own data directory."""
    settings: dict[str, Any] = {"data_dir": data_dir, "port": 0, "http_port": 0}
    settings.update(changes)
    return BrokerConfig(**settings)


def token_auth(directory: Path, secret: bytes, **changes: Any) -> dict[str, Any]:
    """Broker settings for HS256 token authentication with `secret` (stored
    base64 in `directory`, as `magnetar-broker token create-secret-key
    --base64` writes it), plus `changes`."""
    key = directory / "secret.key"
    key.write_bytes(base64.b64encode(secret))
    return {
        "authentication_enabled": True,
        "authentication_providers": "token",
        "token_secret_key": str(key),
        **changes,
    }


class BrokerProcess:
    """The daemon in a subprocess on fixed ports, so it can be SIGKILLed and
    started again on the same address and data directory."""

    def __init__(
        self,
        data_dir: Path,
        log_path: Path,
        *,
        ports: tuple[int, int] | None = None,
        cwd: Path | None = None,
        **settings: object,
    ) -> None:
        self.data_dir = data_dir
        self.log_path = log_path
        # Distinct: with one port given twice the broker's HTTP bind fails,
        # and the start-up probe of that port reaches its binary listener.
        self.port, self.http_port = ports or free_ports(2)
        self.cwd = cwd
        self.env = {
            **os.environ,
            **{f"MAGNETAR_{key.upper()}": str(value) for key, value in settings.items()},
        }
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    # The broker command's mode, and what else it is started with.
    mode = "standalone"

    def _extra_args(self) -> list[str]:
        return []

    def _started(self) -> bool:
        """Whether the started process serves (its HTTP port answers)."""
        try:
            with socket.create_connection(("127.0.0.1", self.http_port), timeout=0.5):
                return True
        except OSError:
            return False

    def start(self, preexec: Callable[[], None] | None = None) -> Self:
        """Start (again); `preexec` runs in the child before exec (limits)."""
        command = [sys.executable, "-m", "magnetar.broker", self.mode, *self._extra_args()]
        command += ["--port", str(self.port), "--http-port", str(self.http_port)]
        command += ["--data-dir", str(self.data_dir)]
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                command, stdout=log, stderr=log, env=self.env, preexec_fn=preexec, cwd=self.cwd
            )
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"broker exited with {self.proc.returncode}; see {self.log_path}"
                )
            if self._started():
                return self
            time.sleep(0.02)
        raise TimeoutError(f"broker process did not start; see {self.log_path}")

    def kill(self) -> None:
        """SIGKILL: no shutdown phase, whatever was not durable is gone."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # a test may have SIGSTOPped it
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


def ledger_files(broker: BrokerThread, namespace: str) -> list[Path]:
    """The ledger data files of a namespace's topics (`namespace` without its
    tenant) on disk: the ledger directory names carry the namespace."""
    root = broker.config.data_dir / "ledgers"
    return [p for d in root.iterdir() if namespace in d.name for p in d.rglob("*") if p.is_file()]
