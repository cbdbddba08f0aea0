"""Reading topics: batch (`spark.read`) and streaming (`spark.readStream`).

The driver lists partitions and finds end offsets (a reader's last message
id; within the *_per_trigger options, admission.py, from the ids and sizes
of the messages after the start); each Spark partition reads one topic
partition's range through a reader on an executor (DESIGN: the checkpoint
holds the offsets, which is the effectively-once consumer pattern). Before
planning from a start offset the driver checks that retention kept what
comes after it (data_loss.py); with `subscription`, committed batches are
acknowledged there (subscription.py). Executors read into Arrow record
batches (range_reader.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from pyarrow import RecordBatch
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow

from magnetar.spark_connector.admission import Admission, Clock
from magnetar.spark_connector.data_loss import DataLossCheck
from magnetar.spark_connector.driver import Driver
from magnetar.spark_connector.offsets import BEFORE_FIRST, Offsets, Position, after, merged
from magnetar.spark_connector.range_reader import PartitionRange, read_range
from magnetar.spark_connector.read_options import ReadOptions
from magnetar.spark_connector.subscription import acknowledge_up_to


def _ranges(start: Offsets, end: Offsets) -> list[InputPartition]:
    return [
        PartitionRange(topic, start.get(topic, BEFORE_FIRST), position).to_spark()
        for topic, position in sorted(end.items())
        if after(position, start.get(topic, BEFORE_FIRST))
    ]


class BatchReader(DataSourceReader):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        check = DataLossCheck(self.options.fail_on_data_loss)
        with Driver(self.options) as driver:
            start, end = driver.starting(), driver.ending()
            gone = check.check_all(start, driver.first_stored, driver.last, {})
            for partition, first in gone.items():
                if first is None:
                    end[partition] = start[partition]  # nothing left to read
            return _ranges(start, end)

    def read(self, partition: InputPartition) -> Iterator[RecordBatch]:
        return read_range(self.options, PartitionRange.from_spark(partition))


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Spark keeps one instance on the driver for the query's life (planning
    and commits); `stop()` is never called, so nothing stays open between calls."""

    def __init__(self, options: ReadOptions, clock: Clock = time.monotonic) -> None:
        self.options = options
        self._admission = Admission(options.limits, clock)
        self._latest: Offsets | None = None  # at the last planning, for reportLatestOffset
        self._available_now: Offsets | None = None
        self._data_loss = DataLossCheck(options.fail_on_data_loss)
        self._acknowledged: dict[str, Position] = {}

    def initialOffset(self) -> dict[str, Any]:
        with Driver(self.options) as driver:
            initial = driver.starting()
            if self.options.subscription is not None:
                # Created now, the subscription keeps retention off what the
                # query has yet to read.
                self._acknowledge(driver, initial)
            return dict(initial)

    def getDefaultReadLimit(self) -> ReadLimit:
        """One limit standing for the *_per_trigger options (admission.py)."""
        return self._admission.default_limit()

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """Each partition's last message when the last batch was planned
        (Spark asks right after latestOffset), shown in the query's progress
        as the source's latestOffset: how far its endOffset is behind."""
        return None if self._latest is None else dict(self._latest)

    def prepareForTriggerAvailableNow(self) -> None:
        """availableNow: read what is there now, in limited batches, then stop."""
        with Driver(self.options) as driver:
            self._available_now = {p: driver.last(p) for p in driver.partitions()}

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        with Driver(self.options) as driver:
            partitions = driver.partitions()
            begin = merged(start, partitions)  # new partitions start at their first message
            end = {p: driver.last(p) for p in partitions}
            self._latest = {p: list(position) for p, position in end.items()}
            gone = self._data_loss.check_all(
                begin, driver.first_stored, end.__getitem__, self._acknowledged
            )
            if self.options.subscription is not None:
                # `start` ends the last completed batch; Spark calls commit()
                # for it only if another batch follows (not after the last
                # batch of an availableNow run).
                self._acknowledge(driver, begin)
            if self._available_now is not None:
                for p, cap in self._available_now.items():
                    if p in end and after(end[p], cap):
                        end[p] = cap
            for p, first in gone.items():
                if first is None:
                    end[p] = begin[p]  # nothing stored: wait for new messages
            # The options' limits, and min_messages_per_trigger's wait
            # (never in an availableNow run: it ends at a planning without a batch).
            available_now = self._available_now is not None
            end = self._admission.end(begin, end, limit, driver.backlog, not available_now)
            for p in partitions:
                if not after(end[p], begin[p]):
                    end[p] = begin[p]
            return dict(end)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        return _ranges(dict(start), dict(end))

    def read(self, partition: InputPartition) -> Iterator[RecordBatch]:
        return read_range(self.options, PartitionRange.from_spark(partition))

    def commit(self, end: dict[str, Any]) -> None:
        """The checkpoint holds the offsets; with `subscription`, acknowledge them."""
        if self.options.subscription is None:
            return
        with Driver(self.options) as driver:
            self._acknowledge(driver, {p: list(v) for p, v in end.items()})

    def _acknowledge(self, driver: Driver, offsets: Offsets) -> None:
        assert self.options.subscription is not None
        todo = {p: v for p, v in offsets.items() if self._acknowledged.get(p) != v}
        done = acknowledge_up_to(driver.client, self.options.subscription, todo)
        self._acknowledged.update(done)
