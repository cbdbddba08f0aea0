"""Event-loop lag: how late a timer fires, sampled all the time.

A coroutine that sleeps ``interval`` seconds wakes late by however long
the loop was busy with something else (a long callback, a full garbage
collection, a blocking call). The histogram shows an operator such a stall
the way a benchmark's latency tail does, with no client attached.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Histogram

# Seconds: from a busy loop's normal jitter up to stalls worth a log line.
LAG_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
SAMPLE_INTERVAL = 0.1


class LoopLagMonitor:
    """Owns one sampling task; :meth:`close` cancels and awaits it."""

    def __init__(
        self,
        registry: CollectorRegistry | None,
        interval: float = SAMPLE_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.histogram = Histogram(
            "magnetar_event_loop_lag_seconds",
            "How late the event loop ran a timer, sampled every 100 ms",
            buckets=LAG_BUCKETS,
            registry=registry,
        )
        self._interval = interval
        self._clock = clock
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._sample(), name="event-loop-lag"
            )

    async def _sample(self) -> None:
        while True:
            began = self._clock()
            await asyncio.sleep(self._interval)
            self.histogram.observe(max(0.0, self._clock() - began - self._interval))

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
