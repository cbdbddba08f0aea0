"""Running the `magnetar` console script from tests, as a user would: a
subprocess (run to its end, or in the background for open-ended consumes)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

from tests.support.polling import eventually


def magnetar(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """`magnetar ARGS` to its end; `env` adds to this process's environment."""
    return subprocess.run(
        [sys.executable, "-m", "magnetar.client.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, **(env or {})},
    )


class Background:
    """`magnetar ARGS` running while the test goes on; its standard output
    and error go to files under `directory` (click flushes every line)."""

    def __init__(self, directory: Path, *args: str) -> None:
        self._out_path = directory / f"out-{id(self)}"
        self._err_path = directory / f"err-{id(self)}"
        self._out: IO[Any] = self._out_path.open("w")
        self._err: IO[Any] = self._err_path.open("w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "magnetar.client.cli", *args],
            stdout=self._out,
            stderr=self._err,
            text=True,
        )

    @property
    def stdout(self) -> str:
        return self._out_path.read_text()

    @property
    def stderr(self) -> str:
        return self._err_path.read_text()

    def wait_for_output(self, lines: int, timeout: float = 15.0) -> None:
        eventually(
            f"{lines} lines of output",
            lambda: len(self.stdout.splitlines()) >= lines or self.process.poll() is not None,
            timeout,
        )

    def interrupt(self, timeout: float = 30.0) -> int:
        """Ctrl-C (SIGINT); the exit code."""
        self.process.send_signal(signal.SIGINT)
        return self.wait(timeout)

    def wait(self, timeout: float = 30.0) -> int:
        try:
            return self.process.wait(timeout)
        finally:
            self.close()

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._out.close()
        self._err.close()
