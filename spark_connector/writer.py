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
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pyspark import TaskContext
from pyspark.sql import Row
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage

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
    options: WriteOptions, rows: Iterator[Row], producer_name: str | None, batch_id: int
) -> int:
    """Send one task's rows; returns how many. The sequence ids make a repeat
    of the same task and batch a no-op for a topic with deduplication on."""
    producers = _TaskProducers(options, producer_name)
    count = 0
    try:
        for index, row in enumerate(rows):
            fields = row.asDict()
            topic = options.topic or fields.get("topic")
            if not topic:
                raise ValueError(f"row {index} has no topic")
            event_time = fields.get("event_time")
            properties = fields.get("properties")
            producers.producer(topic).send_async(
                _payload(fields["value"]),
                producers.answered,
                properties=dict(properties) if properties else None,
                partition_key=fields.get("key") or fields.get("partition_key"),
                sequence_id=batch_id * ROWS_PER_BATCH + index if producer_name else None,
                event_timestamp=int(event_time.timestamp() * 1000)
                if isinstance(event_time, datetime)
                else None,
            )
            count += 1
    except BaseException:
        producers.abandon()
        raise
    producers.finish()
    return count


def _partition_id() -> int:
    context = TaskContext.get()
    return context.partitionId() if context is not None else 0


class BatchWriter(DataSourceWriter):
    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[Row]) -> WrittenRows:
        prefix = self.options.producer_name_prefix
        name = f"{prefix}-{_partition_id()}" if prefix else None
        return WrittenRows(write_rows(self.options, iterator, name, 0))


class StreamWriter(DataSourceStreamWriter):
    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[Row]) -> WrittenRows:
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
