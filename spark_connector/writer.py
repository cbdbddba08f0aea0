"""Writing rows to topics, effectively once.

Each task writes through producers named after the query (or the job's
`producer_name_prefix`) and its partition, with sequence ids built from the
batch id and the row's index in the task: (batch_id << 32) | index. A task
Spark retries, or a query restarted from its checkpoint, therefore sends the
same (producer name, sequence id) pairs again, and the broker's deduplication
drops what it already stored. That holds when deduplication is on for the
topic and a batch's rows, in order, are the same on every attempt (README,
"Spark connector").
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pyarrow import RecordBatch
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from magnetar.client import Client, Producer, Result
from magnetar.spark_connector.options import WriteOptions

ROWS_PER_BATCH = 1 << 32


@dataclass
class WrittenRows(WriterCommitMessage):
    rows: int


class _TaskProducers:
    """One task's producers, one per topic, and the failures they report."""

    def __init__(self, options: WriteOptions, producer_name: str | None) -> None:
        self._options = options
        self._name = producer_name
        self._client = Client(options.service_url, **options.client)
        self._producers: dict[str, Producer] = {}
        self._lock = threading.Lock()
        self._failures: list[str] = []

    def producer(self, topic: str) -> Producer:
        producer = self._producers.get(topic)
        if producer is None:
            producer = self._client.create_producer(
                topic,
                producer_name=self._name,
                # Unbatched: the broker deduplicates a batch by its first
                # sequence id, so a retry whose batches are cut elsewhere than
                # the first attempt's could lose the rows of a straddling one.
                batching_enabled=False,
                block_if_queue_full=True,
                send_timeout_millis=0,  # resend until stored: dedup absorbs repeats
            )
            self._producers[topic] = producer
        return producer

    def answered(self, result: Any, _msg_id: Any) -> None:
        if result != Result.Ok:
            with self._lock:
                self._failures.append(str(result))

    def finish(self) -> None:
        """Wait for every receipt; raise if any send failed (Spark retries)."""
        try:
            for producer in self._producers.values():
                producer.flush()
            if self._failures:
                raise RuntimeError(
                    f"{len(self._failures)} sends failed, first: {self._failures[0]}"
                )
        finally:
            self._client.close()

    def abandon(self) -> None:
        self._client.close()


def _payload(value: Any) -> bytes:
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    if isinstance(value, str):
        return value.encode()
    raise TypeError(f"value must be binary or string, got {type(value).__name__}")


def write_rows(
    options: WriteOptions,
    rows: Iterator[Mapping[str, Any]],
    producer_name: str | None,
    batch_id: int,
) -> int:
    """Send one task's rows (column name -> value); returns how many. The
    sequence ids make a repeat of the same task and batch a no-op for a topic
    with deduplication on."""
    producers = _TaskProducers(options, producer_name)
    answered = producers.answered
    base = batch_id * ROWS_PER_BATCH
    count = 0
    try:
        for index, row in enumerate(rows):
            extra: dict[str, Any] = {}
            for column, keyword in _OPTIONAL:
                value = row.get(column)
                if value is not None and keyword not in extra:
                    extra[keyword] = _convert[keyword](value)
            topic = options.topic or row.get("topic")
            if not topic:
                raise ValueError(f"row {index} has no topic")
            if producer_name:
                extra["sequence_id"] = base + index
            producers.producer(topic).send_async(_payload(row["value"]), answered, **extra)
            count += 1
    except BaseException:
        producers.abandon()
        raise
    producers.finish()
    return count


def _arrow_rows(batches: Iterator[RecordBatch]) -> Iterator[dict[str, Any]]:
    """Rows out of Arrow record batches (converted in C++, a batch at a time)."""
    for batch in batches:
        yield from batch.to_pylist()


# Optional columns and the send keyword each fills (`key` before `partition_key`).
_OPTIONAL = (
    ("key", "partition_key"),
    ("partition_key", "partition_key"),
    ("properties", "properties"),
    ("event_time", "event_timestamp"),
)
_convert: dict[str, Any] = {
    "partition_key": str,
    "properties": dict,
    "event_timestamp": lambda t: int(t.timestamp() * 1000) if isinstance(t, datetime) else None,
}


def _partition_id() -> int:
    context = TaskContext.get()
    return context.partitionId() if context is not None else 0


class BatchWriter(DataSourceArrowWriter):
    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[RecordBatch]) -> WrittenRows:
        prefix = self.options.producer_name_prefix
        name = f"{prefix}-{_partition_id()}" if prefix else None
        return WrittenRows(write_rows(self.options, _arrow_rows(iterator), name, 0))


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
        return WrittenRows(write_rows(self.options, _arrow_rows(iterator), name, batch_id))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass  # every row is stored once its task returned

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass  # a retry resends the same sequence ids; nothing to undo
