"""The "magnetar" Python data source (Spark 4's Data Source API)."""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from magnetar.spark_connector.options import OptionError, WriteOptions
from magnetar.spark_connector.read_options import ReadOptions
from magnetar.spark_connector.reading import BatchReader, StreamReader
from magnetar.spark_connector.writer import BatchWriter, StreamWriter

# What a read returns.
SCHEMA = (
    "value binary, key string, topic string, message_id binary, publish_time timestamp, "
    "event_time timestamp, properties map<string,string>, redelivery_count int"
)


class MagnetarDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "magnetar"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        options = ReadOptions.parse(self.options)
        if options.subscription is not None:
            raise OptionError("option subscription is for spark.readStream only")
        return BatchReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StreamReader(ReadOptions.parse(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return BatchWriter(WriteOptions.parse(self.options, schema.fieldNames()))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return StreamWriter(WriteOptions.parse(self.options, schema.fieldNames()))
