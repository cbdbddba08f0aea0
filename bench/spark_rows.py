"""The "magnetar-rows" source: the connector's batch read handing Spark a
tuple per message, as it did before Arrow record batches (issue 46.4). Bench
spark-cluster reads with it too, so that Arrow is measured against rows in
the same run: the same range reader and messages, only what `read` yields
differs. Not part of the connector."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from magnetar.client import aio
from magnetar.spark_connector.range_reader import PartitionRange, read_messages
from magnetar.spark_connector.read_options import ReadOptions
from magnetar.spark_connector.reading import BatchReader
from magnetar.spark_connector.source import MagnetarDataSource

_UTC = datetime.UTC


def _instant(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, _UTC)


def row(msg: aio.Message) -> tuple[Any, ...]:
    """A message as a row of the source's schema."""
    event = msg.event_timestamp()
    return (
        msg.data(),
        msg.partition_key() or None,
        msg.topic_name(),
        msg.proto_message_id().serialize(),
        _instant(msg.publish_timestamp()),
        _instant(event) if event else None,
        msg.properties(),
        msg.redelivery_count(),
    )


class RowsReader(BatchReader):
    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        for messages in read_messages(self.options, PartitionRange.from_spark(partition)):
            yield from map(row, messages)


class RowsSource(MagnetarDataSource):
    @classmethod
    def name(cls) -> str:
        return "magnetar-rows"

    def reader(self, schema: StructType) -> DataSourceReader:
        return RowsReader(ReadOptions.parse(self.options))


def register(spark: Any) -> None:
    """Register the source, pickled by value: executors need not import bench."""
    import sys

    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # type: ignore[no-untyped-call]
    spark.dataSource.register(RowsSource)
