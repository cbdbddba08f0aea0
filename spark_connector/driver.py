"""The driver's view of the topics read: which partitions, and positions in
them (the last message, the messages after a start with their sizes, the
first still stored, the first published at or after a time)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from magnetar.client import Client, ConsumerType, InitialPosition, Message, MessageId, Reader
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
from magnetar.spark_connector.options import OptionError
from magnetar.spark_connector.read_options import ReadOptions

READ_TIMEOUT_MS = 30_000
# Messages a planning reader fetches ahead: it reads ids and sizes, not rows.
_PLANNING_QUEUE = 100


def message_size(msg: Message) -> int:
    """What max_bytes_per_trigger counts for a message: the bytes of its
    payload (after decompression: the row's `value`), of its key and of its
    properties' names and values (UTF-8)."""
    size = len(msg.data()) + len(msg.partition_key().encode())
    for name, value in msg.properties().items():
        size += len(name.encode()) + len(value.encode())
    return size


@dataclass(frozen=True)
class Waiting:
    """A message a micro-batch may read: where it is, and its message_size."""

    position: Position
    size: int


class Backlog:
    """One partition's messages after `start`, up to and including `end`,
    read on demand by one reader and kept as positions and sizes."""

    def __init__(self, client: Client, partition: str, start: Position, end: Position) -> None:
        self.partition = partition
        self.start = start
        self._client = client
        self._end = end
        self._seen: list[Waiting] = []
        self._reader: Reader | None = None

    def at(self, index: int) -> Waiting | None:
        """The `index`-th message (from 0); None when there are fewer."""
        while len(self._seen) <= index:
            last = self._seen[-1].position if self._seen else self.start
            if not after(self._end, last):
                return None
            if self._reader is None:
                self._reader = self._client.create_reader(
                    self.partition,
                    MessageId.wrap(start_id(self.start)),
                    receiver_queue_size=_PLANNING_QUEUE,
                )
            msg = self._reader.read_next(READ_TIMEOUT_MS)
            position = position_of(msg.message_id().inner)
            if after(position, self._end):
                self._end = last  # the end was inside an entry: nothing more
                return None
            self._seen.append(Waiting(position, message_size(msg)))
        return self._seen[index]

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None


def before(position: Position) -> Position:
    """A position just before the message at `position` (an entry or its first
    message), so that reading what comes after it starts there."""
    ledger, entry, index = position
    if index > 0:
        return [ledger, entry, index - 1]
    return [ledger, entry - 1, -1]  # entry -1: before the ledger's first entry


class Driver:
    """A client for planning; use as a context manager."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def __enter__(self) -> Driver:
        self.client = Client(self.options.service_url, **self.options.client)
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.close()

    def partitions(self) -> list[str]:
        """The partitions read now; a pattern is resolved again at each call,
        so topics created since it was last resolved are in."""
        pattern = self.options.pattern
        if pattern is not None:
            listed = self.client.get_topics_of_namespace(pattern.namespace, pattern.mode)
            return [t for t in listed if pattern.matches(t)]
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

    def first_stored(self, partition: str) -> Position | None:
        """The first message still stored (retention may have deleted older
        ones); None when none is."""
        reader = self.client.create_reader(partition, MessageId.earliest, receiver_queue_size=1)
        try:
            if not reader.has_message_available():
                return None
            return position_of(reader.read_next(READ_TIMEOUT_MS).message_id().inner)
        finally:
            reader.close()

    def backlog(self, partition: str, start: Position, end: Position) -> Backlog:
        """The messages after `start` up to and including `end`, read on demand."""
        return Backlog(self.client, partition, start, end)

    def at_time(self, partition: str, publish_time_ms: int) -> Position:
        """Where to start so that the first message read is the first published
        at or after `publish_time_ms` (after the last one if none is yet)."""
        last = self.last(partition)
        if last == BEFORE_FIRST:
            return BEFORE_FIRST
        reader = self.client.create_reader(
            partition, MessageId.wrap(start_id(before(last))), receiver_queue_size=1
        )
        try:
            if reader.read_next(READ_TIMEOUT_MS).publish_timestamp() < publish_time_ms:
                return last
        finally:
            reader.close()
        # Some message is that recent: a throw-away durable subscription seeks
        # to the time (the broker's search by publish time) and shows which.
        consumer = self.client.subscribe(
            partition,
            f"spark-starting-time-{uuid.uuid4().hex[:12]}",
            consumer_type=ConsumerType.Exclusive,
            initial_position=InitialPosition.Earliest,
            receiver_queue_size=1,
        )
        try:
            consumer.seek(publish_time_ms)
            # A message prefetched before the seek can still arrive after it:
            # the first one published at or after the time is the answer.
            while (msg := consumer.receive(READ_TIMEOUT_MS)).publish_timestamp() < publish_time_ms:
                pass
            found = msg.message_id().inner
        finally:
            consumer.unsubscribe()
        return before(position_of(found))

    def starting(self) -> Offsets:
        partitions = self.partitions()
        if self.options.starting_time is not None:
            return {p: self.at_time(p, self.options.starting_time) for p in partitions}
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
