"""How much a stream's micro-batch reads (issue 46.4): Spark's admission
control for the options max_messages_per_trigger, max_bytes_per_trigger,
min_messages_per_trigger and max_trigger_delay.

Spark's Python data source API carries one ReadLimit between the source and
the engine, and the engine treats it as opaque: it hands back, at each
trigger, what getDefaultReadLimit returned (or ReadAllAvailable when a
trigger must read everything). So the source reports one limit for all its
options (ReadMinRows when min_messages_per_trigger is set, else ReadMaxRows,
else ReadMaxBytes) and applies all of them when it gets that limit back; the
delay of ReadMinRows is the source's to keep, too (the engine keeps none).

The planning reads the ids and sizes of the messages a batch may include
(driver.Backlog), no more than the limits need: the first `min` to count
them, then round-robin over the partitions, one message each in turn, while
the batch stays within both maxima. The first message is always taken, so a
message larger than max_bytes_per_trigger is read, alone, rather than
stalling its partition; the partition that goes first rotates from batch to
batch, so every partition's turn to go first comes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Protocol

from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    ReadMinRows,
)

from magnetar.spark_connector.driver import Waiting
from magnetar.spark_connector.offsets import Offsets, Position, after
from magnetar.spark_connector.read_options import TriggerLimits

Clock = Callable[[], float]  # seconds, monotonic


class Lookahead(Protocol):
    """A partition's messages after the batch's start (driver.Backlog)."""

    def at(self, index: int) -> Waiting | None: ...

    def close(self) -> None: ...


def default_limit(limits: TriggerLimits) -> ReadLimit:
    """The one limit Spark is told: the options' strongest."""
    if limits.min_messages is not None:
        return ReadMinRows(limits.min_messages)
    if limits.max_messages is not None:
        return ReadMaxRows(limits.max_messages)
    if limits.max_bytes is not None:
        return ReadMaxBytes(limits.max_bytes)
    return ReadAllAvailable()


def applied(limit: ReadLimit, limits: TriggerLimits) -> TriggerLimits:
    """What a planning with `limit` applies: every option when it is the
    default limit Spark handed back, nothing for ReadAllAvailable, else the
    limit alone."""
    if limit == default_limit(limits):
        return limits
    if isinstance(limit, ReadAllAvailable):
        return TriggerLimits()
    if isinstance(limit, ReadMaxRows):
        return TriggerLimits(max_messages=limit.max_rows)
    if isinstance(limit, ReadMaxBytes):
        return TriggerLimits(max_bytes=limit.max_bytes)
    if isinstance(limit, ReadMinRows):
        return TriggerLimits(min_messages=limit.min_rows, max_delay_ms=limits.max_delay_ms)
    raise ValueError(f"the magnetar source cannot apply the read limit {limit!r}")


def count_up_to(waiting: Mapping[str, Lookahead], need: int) -> int:
    """How many messages are waiting, counted up to `need`."""
    total = 0
    for name in sorted(waiting):
        index = 0
        while total < need and waiting[name].at(index) is not None:
            index += 1
            total += 1
    return total


def share(waiting: Mapping[str, Lookahead], limits: TriggerLimits, turn: int) -> dict[str, int]:
    """How many messages each partition gives the batch: one partition after
    the other (`turn` says which goes first), one message at a time, while
    the batch keeps within max_messages and max_bytes; the first message is
    taken whatever its size."""
    names = sorted(waiting)
    if not names:
        return {}
    first = turn % len(names)
    active = names[first:] + names[:first]
    taken = dict.fromkeys(names, 0)
    rows = size = 0
    while active:
        still = []
        for name in active:
            message = waiting[name].at(taken[name])
            if message is None:
                continue
            too_many = limits.max_messages is not None and rows + 1 > limits.max_messages
            too_big = limits.max_bytes is not None and size + message.size > limits.max_bytes
            if rows and (too_many or too_big):
                continue  # this partition is done: a batch reads a prefix of each
            taken[name] += 1
            rows += 1
            size += message.size
            still.append(name)
        active = still
    return taken


class Admission:
    """A stream's micro-batch sizes, kept across its plannings on the driver."""

    def __init__(self, limits: TriggerLimits, clock: Clock = time.monotonic) -> None:
        self.limits = limits
        self._clock = clock
        # The query's start counts as a batch: the first one waits too.
        self._last_batch = clock()
        self._turn = 0

    def default_limit(self) -> ReadLimit:
        return default_limit(self.limits)

    def end(
        self,
        begin: Offsets,
        latest: Offsets,
        limit: ReadLimit,
        backlog: Callable[[str, Position, Position], Lookahead],
        wait_for_min: bool = True,
    ) -> Offsets:
        """The end offsets of the next batch from `begin`, given the `latest`
        ones; `begin` itself when no batch is due yet. `wait_for_min` false
        (an availableNow run, which ends at the first planning without a
        batch) reads what is there however little."""
        end = {p: list(begin[p]) for p in latest}
        chosen = applied(limit, self.limits)
        waiting = {
            p: backlog(p, begin[p], position)
            for p, position in sorted(latest.items())
            if after(position, begin[p])
        }
        try:
            if not waiting:
                return end
            if wait_for_min and chosen.min_messages is not None and not self._due(waiting, chosen):
                return end
            if chosen.max_messages is None and chosen.max_bytes is None:
                end.update((p, list(latest[p])) for p in waiting)
            else:
                for p, count in share(waiting, chosen, self._turn).items():
                    last = waiting[p].at(count - 1) if count else None
                    if last is not None:
                        end[p] = list(last.position)
            self._turn += 1
            self._last_batch = self._clock()
            return end
        finally:
            for lookahead in waiting.values():
                lookahead.close()

    def _due(self, waiting: Mapping[str, Lookahead], chosen: TriggerLimits) -> bool:
        """min_messages_per_trigger: enough messages wait, or max_trigger_delay
        has passed since the last batch (and some message waits)."""
        assert chosen.min_messages is not None
        if (self._clock() - self._last_batch) * 1000 >= chosen.max_delay_ms:
            return True
        return count_up_to(waiting, chosen.min_messages) >= chosen.min_messages
