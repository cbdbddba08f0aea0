"""The periodic stats update (Pulsar's statsUpdateFrequencyInSecs): every
interval, the counters of each loaded topic, subscription and consumer
become per-second rates, read by the metrics collector and the admin stats.

Rates are computed here, off the publish path, from plain totals; the clock
is injected so tests can drive `update()` without waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable

from magnetar.broker.topics.base import Topic, is_persistent


def update_topic_rates(topic: Topic, seconds: float) -> None:
    """Close one interval of `seconds` for a topic and everything under it."""
    topic.published.update(seconds)
    topic.dispatched.update(seconds)
    for producer in list(topic.producers.values()):
        if producer.replicated_in is not None:  # a remote cluster's replicator
            producer.replicated_in.update(seconds)
    for sub in list(topic.subscriptions.values()):
        sub.dispatched.update(seconds)
        sub.redelivered.update(seconds)
        for consumer in sub.consumers:
            consumer.dispatched.update(seconds)
    if is_persistent(topic):
        written = topic.ledger.write_stats()
        topic.storage_writes.set_totals(written.entries_written, written.bytes_written)
        topic.storage_writes.update(seconds)


class StatsUpdater:
    """Owns the update task: `start()` once, `stop()` cancels and awaits it."""

    def __init__(
        self,
        topics: Callable[[], Iterable[Topic]],
        interval_s: float,
        clock: Callable[[], float] = time.monotonic,
        *,
        others: Iterable[Callable[[float], None]] = (),
    ) -> None:
        self._topics = topics
        # Rates kept above the topics (the replicators'): each is called
        # with the interval's seconds.
        self._others = list(others)
        self.interval_s = interval_s
        self._clock = clock
        self._last = clock()
        self._task: asyncio.Task[None] | None = None

    def update(self) -> None:
        """Rates over the time since the previous update (or since start)."""
        now = self._clock()
        seconds, self._last = now - self._last, now
        if seconds <= 0:
            return
        for topic in list(self._topics()):
            update_topic_rates(topic, seconds)
        for update in self._others:
            update(seconds)

    def start(self) -> None:
        if self._task is None:
            self._last = self._clock()
            self._task = asyncio.get_running_loop().create_task(self._run(), name="stats-update")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            self.update()

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
