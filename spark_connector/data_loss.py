"""`fail_on_data_loss`: did retention delete messages a query had yet to read?

A partition's start offset is the last message already read. Retention
deletes whole ledgers from the front of a topic, so what a reader at earliest
sees first (the first message still stored) tells it: at or before the start,
or right after it in the same ledger, nothing is missing. Further on, the
messages between were deleted, with one case the client cannot see: the start
was the last entry of a ledger that went, and nothing was lost. The source
knows that case when it acknowledged the start itself on its subscription
(its own cursor let that ledger go); otherwise it reports the loss, which errs
on the side of failing the query.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import structlog

from magnetar.spark_connector.offsets import BEFORE_FIRST, Position, after

log = structlog.get_logger(__name__)


class DataLossError(RuntimeError):
    """Messages were deleted before the query read them (fail_on_data_loss=true)."""


def follows(start: Position, first: Position) -> bool:
    """Whether `first` is known to be the message right after `start`, or in
    `start`'s own entry (stored, then)."""
    if first[:2] == start[:2]:
        return True
    return first[0] == start[0] and first[1] == start[1] + 1


class DataLossCheck:
    """Checks start offsets against what the broker still stores."""

    def __init__(self, fail: bool) -> None:
        self._fail = fail
        self._warned: set[tuple[str, tuple[int, ...]]] = set()

    def lost(
        self,
        partition: str,
        start: Position,
        first_stored: Position | None,
        last: Position,
        acknowledged: Position | None = None,
    ) -> bool:
        """Whether messages after `start` are gone: raises when the query must
        fail, else warns once per partition and start and returns True."""
        if start == BEFORE_FIRST:
            return False
        if first_stored is None:
            gone = after(last, start)  # there were messages after it, none is left
        else:
            gone = (
                after(first_stored, start)
                and not follows(start, first_stored)
                and start != acknowledged
            )
        if not gone:
            return False
        shown = "none" if first_stored is None else str(first_stored)
        if self._fail:
            raise DataLossError(
                f"partition {partition}: messages after {start} were deleted (retention) "
                f"before the query read them; the first still stored is {shown}. Set the "
                "option fail_on_data_loss to false to read on from the earliest available."
            )
        key = (partition, tuple(start))
        if key not in self._warned:
            self._warned.add(key)
            log.warning(
                "messages deleted before they were read; reading on from the earliest "
                "available (fail_on_data_loss=false)",
                partition=partition,
                start=start,
                first_stored=first_stored,
            )
        return True

    def check_all(
        self,
        starts: Mapping[str, Position],
        first_stored: Callable[[str], Position | None],
        last: Callable[[str], Position],
        acknowledged: Mapping[str, Position],
    ) -> dict[str, Position | None]:
        """The partitions whose messages after their start are gone, each with
        its first message still stored (raising instead when the query must
        fail); asks the broker only about partitions that have a start."""
        found: dict[str, Position | None] = {}
        for partition, start in starts.items():
            if start == BEFORE_FIRST:
                continue
            first = first_stored(partition)
            # The last position matters only when nothing is stored.
            newest = last(partition) if first is None else start
            if self.lost(partition, start, first, newest, acknowledged.get(partition)):
                found[partition] = first
        return found
