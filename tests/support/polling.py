"""Waiting for a condition in tests that drive real brokers and clients."""

from __future__ import annotations

import time
from collections.abc import Callable


def eventually(what: str, condition: Callable[[], bool], timeout: float = 15.0) -> None:
    """Poll ``condition`` every 20 ms; fail naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout} s"
        time.sleep(0.02)
