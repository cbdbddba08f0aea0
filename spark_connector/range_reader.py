"""Reading one partition range on an executor: what `read` of a batch or
streaming read returns, as Arrow record batches of the source's schema.

Spark 4's Python data source passes the record batches `read` yields to the
JVM as they are (it checks the first one's schema against the source's),
where tuples go through a per-row, per-column conversion in the Python
worker. The messages come through a reader of the async core on the task's
own event loop (task_client.py), a batch at a time.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from magnetar.client import aio
from magnetar.client.aio.reader.partitioned import PartitionedReader
from magnetar.client.aio.reader.reader import Reader
from magnetar.proto.ids import serialize_many
from magnetar.proto.messages import partition_key
from magnetar.proto.pulsar_api_pb2 import MessageMetadata, SingleMessageMetadata
from magnetar.spark_connector.driver import READ_TIMEOUT_MS
from magnetar.spark_connector.offsets import Position, after, position_of, start_id
from magnetar.spark_connector.read_options import ReadOptions
from magnetar.spark_connector.task_client import TaskClient

# A record batch holds at most this many messages, or about this many bytes
# of values (a batch is a unit Spark buffers; ten thousand is its own
# default for Arrow batches).
ROWS_PER_BATCH = 8192
BYTES_PER_BATCH = 8 << 20

_TIMESTAMP = pa.timestamp("us", tz="UTC")
# The source's schema (source.SCHEMA) as Spark's Python worker expects it
# (pyspark.sql.pandas.types.to_arrow_schema with timezone UTC): timestamps are
# instants, microseconds since the epoch in UTC.
ARROW_SCHEMA = pa.schema(
    [
        ("value", pa.binary()),
        ("key", pa.string()),
        ("topic", pa.string()),
        ("message_id", pa.binary()),
        ("publish_time", _TIMESTAMP),
        ("event_time", _TIMESTAMP),
        ("properties", pa.map_(pa.string(), pa.string())),
        ("redelivery_count", pa.int32()),
    ]
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


def _timestamps(ms: list[int | None]) -> pa.Array:
    return pa.array(ms, pa.timestamp("ms", tz="UTC")).cast(_TIMESTAMP)


_PROPERTIES = ARROW_SCHEMA.field("properties").type
_Metadata = MessageMetadata | SingleMessageMetadata


def _properties(metas: list[_Metadata]) -> pa.Array:
    """The properties column; when no message has any (most topics), empty
    maps built from their offsets rather than converted one by one."""
    if any(meta.properties for meta in metas):
        return pa.array([{kv.key: kv.value for kv in m.properties} for m in metas], _PROPERTIES)
    none = pa.array([], pa.string())
    return pa.MapArray.from_arrays(pa.array([0] * (len(metas) + 1), pa.int32()), none, none)


def record_batch(messages: Sequence[aio.Message]) -> pa.RecordBatch:
    """The rows of `messages` (received messages), one column at a time.
    A message without key or event time has null there. Key, event time
    and properties come from each message's metadata, read once per message
    (the per-message accessors would look it up once per column)."""
    metas = [m.metadata_view() for m in messages]
    columns = [
        pa.array([m.data() for m in messages], pa.binary()),
        pa.array([partition_key(meta) or None for meta in metas], pa.string()),
        pa.array([m.topic_name() for m in messages], pa.string()),
        pa.array(serialize_many([m.proto_message_id() for m in messages]), pa.binary()),
        _timestamps([m.publish_timestamp() for m in messages]),
        _timestamps([meta.event_time or None for meta in metas]),
        _properties(metas),
        pa.array([m.redelivery_count() for m in messages], pa.int32()),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)


class _RangeReading:
    """A reader positioned in one range; `take()` gives its next messages."""

    def __init__(self, reader: Reader, part: PartitionRange) -> None:
        self._reader = reader
        self._end = part.end
        self._done = not after(part.end, part.start)

    @classmethod
    async def open(
        cls, client: aio.Client, options: ReadOptions, part: PartitionRange
    ) -> _RangeReading:
        keywords = dict(options.reader)  # create_reader's, as the blocking client takes them
        prefix = keywords.pop("subscription_role_prefix", None)
        conf = aio.ConsumerConfiguration.from_reader_keywords(keywords)
        reader = await client.create_reader(part.topic, start_id(part.start), conf, prefix)
        if isinstance(reader, PartitionedReader):  # the driver plans ranges of partitions
            await reader.close()
            raise ValueError(f"{part.topic} is a partitioned topic: a range is one partition's")
        return cls(reader, part)

    async def take(self) -> list[aio.Message]:
        """The next messages of the range, up to a batch's worth; none after its end."""
        taken: list[aio.Message] = []
        end, read_many, size = self._end, self._reader.read_many, 0
        while not self._done and len(taken) < ROWS_PER_BATCH and size < BYTES_PER_BATCH:
            messages = await read_many(
                ROWS_PER_BATCH - len(taken), BYTES_PER_BATCH - size, READ_TIMEOUT_MS
            )
            # A reader's positions only grow: when the last one is before the
            # end, so is every one (one comparison for all of them).
            if after(end, position_of(messages[-1].proto_message_id())):
                taken += messages
                size += sum(len(msg.data()) for msg in messages)
                continue
            for msg in messages:
                position = position_of(msg.proto_message_id())
                if after(position, end):  # the end was not a message of its own
                    self._done = True
                    break
                taken.append(msg)
                self._done = not after(end, position)
                if self._done:
                    break
        return taken


def read_messages(options: ReadOptions, part: PartitionRange | None) -> Iterator[list[aio.Message]]:
    """The messages of one partition range, a record batch's worth at a time."""
    if part is None or not after(part.end, part.start):
        return
    task = TaskClient(options.service_url, options.client)
    try:
        reading = task.run(_RangeReading.open(task.client, options, part))
        while messages := task.run(reading.take()):
            yield messages
    finally:
        task.close()


def read_range(options: ReadOptions, part: PartitionRange | None) -> Iterator[pa.RecordBatch]:
    """The rows of one partition range, in record batches."""
    return map(record_batch, read_messages(options, part))
