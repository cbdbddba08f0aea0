"""Ticker: one task running a consumer's periodic jobs (ack flush, wheels, stats).

Each job has an interval and an `active` test; an inactive job is not
scheduled (its next run moves to one interval after it becomes active), so an
idle consumer sleeps until `poke()` says something changed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

from magnetar.client.aio.log import get_logger
from magnetar.client.aio.tasks import cancel_and_wait

_log = get_logger("magnetar.client.sync.consumer")


@dataclass
class Job:
    name: str
    interval: Callable[[], float]
    run: Callable[[], None]
    active: Callable[[], bool] = field(default=lambda: True)
    next_due: float | None = None


class Ticker:
    def __init__(self, name: str) -> None:
        self.name = name
        self._jobs: list[Job] = []
        self._poked = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def add(self, job: Job) -> None:
        self._jobs.append(job)

    def start(self) -> None:
        if self._task is None and self._jobs:
            self._task = asyncio.get_running_loop().create_task(self._loop(), name=self.name)

    def poke(self) -> None:
        self._poked.set()

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while self._task is not None:
            now = loop.time()
            wake: float | None = None
            for job in self._jobs:
                if not job.active():
                    job.next_due = None
                    continue
                if job.next_due is None:
                    job.next_due = now + job.interval()
                if job.next_due <= now:
                    job.next_due = now + job.interval()
                    try:
                        job.run()
                    except Exception as exc:  # a job's bug must not stop the others
                        _log.exception("periodic job failed", job=job.name, error=str(exc))
                wake = job.next_due if wake is None else min(wake, job.next_due)
            self._poked.clear()
            timeout = None if wake is None else max(wake - loop.time(), 0.0)
            # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancel.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._poked.wait()
