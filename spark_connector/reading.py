"""Reading topics: batch (`spark.read`) and streaming (`spark.readStream`).

The driver lists partitions and finds end offsets (a reader's last message
id; with `max_messages_per_trigger`, the position of the N-th message after
the start, found by reading ids); each Spark partition reads one topic
partition's range through a reader on an executor (DESIGN: the checkpoint
holds the offsets, which is the effectively-once consumer pattern).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from magnetar.client import Client, MessageId
from magnetar.spark_connector.offsets import (
    BEFORE_FIRST,
    Offsets,
    Position,
    after,
    merged,
    parse_json,
    position_of,
    start_id,
)
from magnetar.spark_connector.options import CLIENT_PREFIX, OptionError, client_options

READ_TIMEOUT_MS = 30_000
_UTC = datetime.UTC


@dataclass(frozen=True)
class ReadOptions:
    service_url: str
    topics: list[str]
    starting_offsets: str = "earliest"
    ending_offsets: str = "latest"
    starting_time: int | None = None
    max_messages_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    client: dict[str, Any] = field(default_factory=dict)

    KNOWN = frozenset({
        "service_url", "topic", "topics", "topics_pattern", "starting_offsets",
        "ending_offsets", "starting_time", "max_messages_per_trigger", "fail_on_data_loss",
        "path",
    })  # fmt: skip

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReadOptions:
        unknown = [o for o in options if o not in cls.KNOWN and not o.startswith(CLIENT_PREFIX)]
        unknown = [o for o in unknown if not o.startswith("reader.")]
        if unknown:
            raise OptionError(f"unknown option(s) for reading: {', '.join(sorted(unknown))}")
        service_url = options.get("service_url")
        if not service_url:
            raise OptionError("option service_url is required (e.g. pulsar://localhost:6650)")
        chosen = [k for k in ("topic", "topics", "topics_pattern") if options.get(k)]
        if len(chosen) != 1:
            raise OptionError("give exactly one of the options topic, topics, topics_pattern")
        if chosen[0] == "topics_pattern":
            raise OptionError("option topics_pattern is not supported yet; list them in topics")
        topics = [t.strip() for t in options[chosen[0]].split(",") if t.strip()]
        limit = options.get("max_messages_per_trigger")
        start_time = options.get("starting_time")
        try:
            max_messages = int(limit) if limit is not None else None
            starting_time = int(start_time) if start_time is not None else None
        except ValueError as exc:
            raise OptionError(f"max_messages_per_trigger / starting_time: {exc}") from None
        if starting_time is not None:
            raise OptionError("option starting_time is not supported yet; use starting_offsets")
        if max_messages is not None and max_messages < 1:
            raise OptionError("option max_messages_per_trigger must be at least 1")
        return cls(
            service_url,
            topics,
            options.get("starting_offsets", "earliest"),
            options.get("ending_offsets", "latest"),
            starting_time,
            max_messages,
            options.get("fail_on_data_loss", "true").lower() != "false",
            client_options(options),
        )


@dataclass(frozen=True)
class PartitionRange:
    """One topic partition's messages after `start`, up to and including `end`."""

    topic: str
    start: Position
    end: Position

    def to_spark(self) -> InputPartition:
        # Spark ships InputPartition(value) to the executors as it is.
        return InputPartition((self.topic, self.start, self.end))

    @classmethod
    def from_spark(cls, partition: InputPartition) -> PartitionRange | None:
        """None for the empty partition Spark reads when there were no ranges."""
        if partition.value is None:
            return None
        topic, start, end = partition.value
        return cls(topic, list(start), list(end))


class _Driver:
    """The driver's view of the topics: partitions and positions."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def __enter__(self) -> _Driver:
        self.client = Client(self.options.service_url, **self.options.client)
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.close()

    def partitions(self) -> list[str]:
        names: list[str] = []
        for topic in self.options.topics:
            names.extend(self.client.get_topic_partitions(topic))
        return names

    def last(self, partition: str) -> Position:
        reader = self.client.create_reader(partition, MessageId.latest)
        try:
            last = reader.get_last_message_id()
        finally:
            reader.close()
        return BEFORE_FIRST if last.entry_id() < 0 else position_of(last.inner)

    def nth_after(self, partition: str, start: Position, count: int, end: Position) -> Position:
        """The position of the `count`-th message after `start`, at most `end`."""
        reader = self.client.create_reader(partition, MessageId.wrap(start_id(start)))
        try:
            position = start
            for _ in range(count):
                if not after(end, position):
                    break
                position = position_of(reader.read_next(READ_TIMEOUT_MS).message_id().inner)
            return position
        finally:
            reader.close()

    def starting(self) -> Offsets:
        partitions = self.partitions()
        spec = self.options.starting_offsets
        if spec == "earliest":
            return merged({}, partitions)
        if spec == "latest":
            return {p: self.last(p) for p in partitions}
        return parse_json("starting_offsets", spec, partitions)

    def ending(self) -> Offsets:
        partitions = self.partitions()
        spec = self.options.ending_offsets
        if spec == "latest":
            return {p: self.last(p) for p in partitions}
        if spec == "earliest":
            raise OptionError("option ending_offsets cannot be earliest")
        return parse_json("ending_offsets", spec, partitions)


def _row(msg: Any) -> tuple[Any, ...]:
    event = msg.event_timestamp()
    return (
        msg.data(),
        msg.partition_key() or None,
        msg.topic_name(),
        msg.message_id().serialize(),
        datetime.datetime.fromtimestamp(msg.publish_timestamp() / 1000, _UTC),
        datetime.datetime.fromtimestamp(event / 1000, _UTC) if event else None,
        dict(msg.properties()),
        msg.redelivery_count(),
    )


def read_range(options: ReadOptions, part: PartitionRange | None) -> Iterator[tuple[Any, ...]]:
    """The rows of one partition range, read through a reader."""
    if part is None or not after(part.end, part.start):
        return
    client = Client(options.service_url, **options.client)
    try:
        reader = client.create_reader(part.topic, MessageId.wrap(start_id(part.start)))
        position = part.start
        while after(part.end, position):
            msg = reader.read_next(READ_TIMEOUT_MS)
            position = position_of(msg.message_id().inner)
            if after(position, part.end):
                break
            yield _row(msg)
    finally:
        client.close()


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
        with _Driver(self.options) as driver:
            return _ranges(driver.starting(), driver.ending())

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        return read_range(self.options, PartitionRange.from_spark(partition))


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._available_now: Offsets | None = None

    def initialOffset(self) -> dict[str, Any]:
        with _Driver(self.options) as driver:
            return dict(driver.starting())

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_messages_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def prepareForTriggerAvailableNow(self) -> None:
        """availableNow: read what is there now, in limited batches, then stop."""
        with _Driver(self.options) as driver:
            self._available_now = {p: driver.last(p) for p in driver.partitions()}

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        with _Driver(self.options) as driver:
            partitions = driver.partitions()
            begin = merged(start, partitions)  # new partitions start at their first message
            end = {p: driver.last(p) for p in partitions}
            if self._available_now is not None:
                for p, cap in self._available_now.items():
                    if p in end and after(end[p], cap):
                        end[p] = cap
            if isinstance(limit, ReadMaxRows):
                share, extra = divmod(limit.max_rows, max(len(partitions), 1))
                for i, p in enumerate(sorted(partitions)):
                    count = share + (1 if i < extra else 0)
                    if after(end[p], begin[p]):
                        end[p] = driver.nth_after(p, begin[p], count, end[p])
            for p in partitions:
                if not after(end[p], begin[p]):
                    end[p] = begin[p]
            return dict(end)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        return _ranges(dict(start), dict(end))

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        return read_range(self.options, PartitionRange.from_spark(partition))

    def commit(self, end: dict[str, Any]) -> None:
        pass  # the checkpoint holds the offsets; nothing to acknowledge
