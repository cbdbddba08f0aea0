"""Waiting for a condition in tests that drive real brokers and clients."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


def eventually(what: str, condition: Callable[[], bool], timeout: float = 15.0) -> None:
    """Poll ``condition`` every 20 ms; fail naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout} s"
        time.sleep(0.02)


async def eventually_async(
    what: str,
    condition: Callable[[], bool],
    timeout: float = 15.0,  # noqa: ASYNC109 (the failure names `what` and the time, as eventually's)
) -> None:
    """`eventually` for a test on an event loop, polling every 10 ms: sleeping
    on the loop lets the client under test, which runs on that loop too, work."""
    deadline = time.monotonic() + timeout
    # The condition is the state of another component: no event to await.
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout} s"
        await asyncio.sleep(0.01)
