"""A pulsar-lite broker (PyPI `pulsar-lite`, a Pulsar-protocol broker we did not write).

`PulsarLite(workdir)` runs the binary as a subprocess on a free loopback port
with its own data directory and its metrics endpoint off (it would otherwise
bind 0.0.0.0:8080, clashing between tests). `kill()` then `start()` again
brings it back on the same port with the same data, for restart tests.

What it supports (found by probing it): topics created on first use,
partitioned topics only through `default_partitions` (every new topic then has
that many partitions), batching, every compression codec (it never looks
inside payloads), chunked messages (forwarded as plain entries). It does not
advertise max_message_size in CONNECTED (clients assume 5 MiB), has no
deduplication (PRODUCER_SUCCESS always says last_sequence_id -1 and a resent
sequence id is stored again) and no HTTP lookup or admin API.
"""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType

from tests.support.ports import free_port

STARTUP_TIMEOUT = 20.0


def lite_binary() -> Path:
    import pulsar_lite

    return Path(pulsar_lite.__file__).parent / "bin" / "pulsar-lite"


class PulsarLite:
    def __init__(
        self,
        workdir: Path,
        *,
        default_partitions: int = 0,
        max_message_size: int | None = None,
    ) -> None:
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.config = workdir / "pulsar-lite.toml"
        lines = [f"default_partitions = {default_partitions}"]
        if max_message_size is not None:
            lines.append(f"max_message_size_bytes = {max_message_size}")
        lines += ["[metrics]", "enabled = false", ""]
        self.config.write_text("\n".join(lines))
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> PulsarLite:
        assert self.proc is None, "already running"
        log = (self.workdir / "pulsar-lite.log").open("ab")
        try:
            self.proc = subprocess.Popen(
                [
                    str(lite_binary()),
                    "--config",
                    str(self.config),
                    "--addr",
                    self.address,
                    "--db-path",
                    str(self.workdir / "db"),
                    "--log-level",
                    "warn",
                ],
                stdout=log,
                stderr=log,
                cwd=self.workdir,
            )
        finally:
            log.close()
        self._wait_listening()
        return self

    def _wait_listening(self) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"pulsar-lite exited with {self.proc.returncode}; see {self.workdir}"
                )
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("pulsar-lite did not start listening") from None
                time.sleep(0.02)

    def kill(self) -> None:
        """SIGKILL: no clean shutdown (connections just drop)."""
        if self.proc is None:
            return
        self.proc.kill()
        self.proc.wait()
        self.proc = None

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def __enter__(self) -> PulsarLite:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
