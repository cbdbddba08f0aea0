"""Writing rows to topics, effectively once.

Each task writes through producers named after the query (or the job's
`producer_name_prefix`) and its partition, with sequence ids built from the
batch id and the row's index in the task: (batch_id << 32) | index. A task
Spark retries, or a query restarted from its checkpoint, therefore sends the
same (producer name, sequence id) pairs again, and the broker's deduplication
drops what it already stored. That holds when deduplication is on for the
topic and a batch's rows, in order, are the same on every attempt (README,
"Spark connector").

A task sends through the async core on its own event loop (task_client.py),
taking Spark's Arrow record batches a column at a time.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import repeat

import pyarrow as pa
from pyarrow import RecordBatch
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from magnetar.client import aio
from magnetar.client.aio.client import AnyProducer
from magnetar.client.aio.errors import PulsarException
from magnetar.proto.ids import MessageId
from magnetar.spark_connector.options import WriteOptions
from magnetar.spark_connector.task_client import TaskClient

ROWS_PER_BATCH = 1 << 32


@dataclass
class WrittenRows(WriterCommitMessage):
    rows: int


# One row to send: value, partition key, properties, event time (ms), topic.
Row = tuple[bytes, str | None, dict[str, str] | None, int | None, str | None]


class _TaskSender:
    """One task's producers, one per topic, on the task's loop; the failures
    their receipts report. Sequence ids count the task's rows from
    (batch id << 32) when the producers are named."""

    def __init__(self, client: aio.Client, producer_name: str | None, batch_id: int) -> None:
        self._client = client
        self._conf = aio.ProducerConfiguration(
            producer_name=producer_name or None,
            # Unbatched: the broker deduplicates a batch by its first
            # sequence id, so a retry whose batches are cut elsewhere than the
            # first attempt's could lose the rows of a straddling one.
            batching_enabled=False,
            send_timeout_millis=0,  # resend until stored: dedup absorbs repeats
        )
        self._named = bool(producer_name)
        self._base = batch_id * ROWS_PER_BATCH
        self._producers: dict[str, AnyProducer] = {}
        self._failures: list[str] = []
        self.count = 0

    def _answered(self, error: PulsarException | None, _msg_id: MessageId | None) -> None:
        if error is not None:
            self._failures.append(str(error))

    async def _producer(self, topic: str) -> AnyProducer:
        producer = self._producers.get(topic)
        if producer is None:
            producer = await self._client.create_producer(topic, self._conf)
            self._producers[topic] = producer
        return producer

    async def send(self, rows: Iterable[Row]) -> None:
        """Queue every row, waiting only while a producer's queue is full."""
        answered, producers = self._answered, self._producers
        for value, key, properties, event_time, topic in rows:
            if topic is None:
                raise ValueError(f"row {self.count} has no topic")
            producer = producers.get(topic) or await self._producer(topic)
            msg = aio.OutgoingMessage(
                value,
                properties=properties,
                partition_key=key,
                sequence_id=self._base + self.count if self._named else None,
                event_time=event_time,
            )
            # A partitioned topic's producer routes to one per partition.
            target = (
                producer.route(msg) if isinstance(producer, aio.PartitionedProducer) else producer
            )
            if not target.has_capacity():
                await target.wait_for_capacity()
            target.send_async(msg, answered)
            self.count += 1

    async def finish(self) -> None:
        """Wait for every receipt; raise if any send failed (Spark retries)."""
        for producer in self._producers.values():
            await producer.flush()
        if self._failures:
            raise RuntimeError(f"{len(self._failures)} sends failed, first: {self._failures[0]}")


def _column(batch: RecordBatch, name: str) -> pa.Array | None:
    """A column, or None when the batch has none or it is all null."""
    index = batch.schema.get_field_index(name)
    if index < 0:
        return None
    column = batch.column(index)
    return None if column.null_count == len(column) else column


def _payloads(batch: RecordBatch) -> list[bytes]:
    column = batch.column(batch.schema.get_field_index("value"))
    kind = column.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        column = column.cast(pa.large_binary() if pa.types.is_large_string(kind) else pa.binary())
    elif not (pa.types.is_binary(kind) or pa.types.is_large_binary(kind)):
        raise TypeError(f"value must be binary or string, got {kind}")
    if column.null_count:
        first = column.is_null().index(True).as_py()
        raise TypeError(f"value must be binary or string, got null (row {first} of the batch)")
    values: list[bytes] = column.to_pylist()
    return values


def _keys(batch: RecordBatch) -> list[str | None] | None:
    """The partition keys: `key`, else `partition_key`, as strings."""
    keys: list[str | None] | None = None
    for name in ("key", "partition_key"):
        column = _column(batch, name)
        if column is None:
            continue
        found = column.cast(pa.string()).to_pylist()
        keys = (
            found
            if keys is None
            else [k if k is not None else f for k, f in zip(keys, found, strict=True)]
        )
    return keys


def _properties(batch: RecordBatch) -> list[dict[str, str] | None] | None:
    column = _column(batch, "properties")
    if column is None:
        return None
    return [None if p is None else dict(p) for p in column.to_pylist()]


def _event_times(batch: RecordBatch) -> list[int | None] | None:
    """Event times in ms since the epoch (a column that is not a timestamp: none)."""
    column = _column(batch, "event_time")
    if column is None or not pa.types.is_timestamp(column.type):
        return None
    millis = column.cast(pa.timestamp("ms", tz=column.type.tz), safe=False)
    times: list[int | None] = millis.cast(pa.int64()).to_pylist()
    return times


def _rows(batch: RecordBatch, topic: str | None) -> Iterator[Row]:
    """A record batch's rows as the sender takes them, converted a column at a time."""
    topics: Iterable[str | None] = repeat(topic)
    if topic is None:
        column = _column(batch, "topic")
        topics = repeat(None) if column is None else column.cast(pa.string()).to_pylist()
    none = repeat(None)
    return zip(
        _payloads(batch),
        _keys(batch) or none,
        _properties(batch) or none,
        _event_times(batch) or none,
        topics,
        strict=False,  # the value column sets the length
    )


def write_rows(
    options: WriteOptions,
    batches: Iterator[RecordBatch],
    producer_name: str | None,
    batch_id: int,
) -> int:
    """Send one task's rows; returns how many. The sequence ids make a repeat
    of the same task and batch a no-op for a topic with deduplication on."""
    task = TaskClient(options.service_url, options.client)
    try:
        sender = _TaskSender(task.client, producer_name, batch_id)
        for batch in batches:
            task.run(sender.send(_rows(batch, options.topic)))
        task.run(sender.finish())
        return sender.count
    finally:
        task.close()


def _partition_id() -> int:
    context = TaskContext.get()
    return context.partitionId() if context is not None else 0


class BatchWriter(DataSourceArrowWriter):
    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[RecordBatch]) -> WrittenRows:
        prefix = self.options.producer_name_prefix
        name = f"{prefix}-{_partition_id()}" if prefix else None
        return WrittenRows(write_rows(self.options, iterator, name, 0))


class StreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[RecordBatch]) -> WrittenRows:
        context = TaskContext.get()
        assert context is not None, "a stream writer runs in a Spark task"
        batch_id = int(context.getLocalProperty("streaming.sql.batchId") or 0)
        query_id = context.getLocalProperty("sql.streaming.queryId") or "query"
        prefix = self.options.producer_name_prefix or f"spark-{query_id}"
        name = f"{prefix}-{context.partitionId()}"
        return WrittenRows(write_rows(self.options, iterator, name, batch_id))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass  # every row is stored once its task returned

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass  # a retry resends the same sequence ids; nothing to undo
