"""Every column of every row, both ways (issue 46.4). A batch read returns,
in Arrow record batches of a few thousand rows, exactly what the official
client reads back: values of any bytes, null keys and event times where the
producer set none, properties, publish and event times as instants. A write
of a DataFrame with keys, properties, event times and a topic per row stores
each of them."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

import pulsar
from pyspark.sql.pandas.types import to_arrow_schema

from magnetar.spark_connector.range_reader import ARROW_SCHEMA, ROWS_PER_BATCH
from magnetar.spark_connector.source import SCHEMA
from tests.support.brokers import BrokerThread
from tests.support.draining import stored_messages
from tests.support.official import official_client
from tests.support.spark_topics import create_partitioned

PARTITIONS = 2
# More than two record batches per partition.
COUNT = 5 * ROWS_PER_BATCH
EPOCH_MS = 1_790_000_000_123


def _message(i: int) -> tuple[bytes, str | None, dict[str, str], int | None]:
    """Message i: value (any bytes), key, properties, event time; every
    third has no key, every second no properties, every fifth no event time."""
    value = bytes([i % 256, 0, 255]) + str(i).encode()
    key = f"k{i % 11}" if i % 3 else None
    properties = {"i": str(i), "sq": str(i * i)} if i % 2 else {}
    event = EPOCH_MS + 7 * i if i % 5 else None
    return value, key, properties, event


def test_the_arrow_schema_is_the_one_spark_expects(spark: Any) -> None:
    schema = spark.createDataFrame([], SCHEMA).schema
    assert to_arrow_schema(schema, timezone="UTC").equals(ARROW_SCHEMA)


def test_a_batch_read_returns_every_column_of_every_message(
    spark: Any, broker: BrokerThread
) -> None:
    topic = f"persistent://public/default/rows-{uuid.uuid4().hex[:8]}"
    create_partitioned(broker, topic, PARTITIONS)
    with official_client(broker.url) as client:
        # Batched: thousands of messages fast, and ids with batch indexes.
        producer = client.create_producer(topic, batching_enabled=True, block_if_queue_full=True)
        results: list[Any] = []
        for i in range(COUNT):
            value, key, properties, event = _message(i)
            options: dict[str, Any] = {"properties": properties}
            if key is not None:
                options["partition_key"] = key
            if event is not None:
                options["event_timestamp"] = event
            producer.send_async(value, lambda result, _id: results.append(result), **options)
        producer.flush()
    assert results == [pulsar.Result.Ok] * COUNT
    stored = {}
    for index in range(PARTITIONS):
        for msg in stored_messages(broker.url, f"{topic}-partition-{index}"):
            msg_id = msg.message_id()
            where = (msg.topic_name(), msg_id.ledger_id(), msg_id.entry_id(), msg_id.batch_index())
            stored[where] = msg
    assert len(stored) == COUNT

    rows = (
        spark.read.format("magnetar")
        .option("service_url", broker.url)
        .option("topic", topic)
        # create_reader's keywords reach the executors' readers.
        .option("reader.receiver_queue_size", "300")
        .option("reader.subscription_role_prefix", "rows-test")
        .load()
        .selectExpr(
            "*",
            "unix_micros(publish_time) AS publish_us",
            "unix_micros(event_time) AS event_us",
        )
        .collect()
    )
    assert len(rows) == COUNT
    seen = set()
    produced = {m[0]: m for m in map(_message, range(COUNT))}
    for row in rows:
        msg_id = pulsar.MessageId.deserialize(bytes(row.message_id))
        where = (row.topic, msg_id.ledger_id(), msg_id.entry_id(), msg_id.batch_index())
        assert where not in seen
        seen.add(where)
        msg = stored[where]
        assert row.topic == f"{topic}-partition-{msg_id.partition()}"
        assert bytes(row.value) == msg.data()
        assert row.key == (msg.partition_key() or None)
        assert row.properties == msg.properties()
        assert row.publish_us == msg.publish_timestamp() * 1000
        assert row.event_us == (msg.event_timestamp() * 1000 or None)
        assert row.redelivery_count == 0
        # And what was produced: nulls where the producer set nothing.
        _, key, properties, event = produced[bytes(row.value)]
        assert (row.key, row.properties) == (key, properties)
        assert row.event_us == (None if event is None else event * 1000)
    assert len(seen) == COUNT


def test_a_write_stores_keys_properties_event_times_and_topics(
    spark: Any, broker: BrokerThread
) -> None:
    topics = [f"persistent://public/default/wrows-{uuid.uuid4().hex[:8]}-{n}" for n in "ab"]
    utc = datetime.UTC
    rows = []
    for i in range(3000):
        value, key, properties, event = _message(i)
        when = None if event is None else datetime.datetime.fromtimestamp(event / 1000, utc)
        rows.append((value, key, properties or None, when, topics[i % 2]))
    frame = spark.createDataFrame(
        rows,
        "value binary, key string, properties map<string,string>, event_time timestamp, "
        "topic string",
    )
    (
        frame.repartition(2)
        .write.format("magnetar")
        .option("service_url", broker.url)
        .option("producer_name_prefix", "rows")
        .mode("append")
        .save()
    )
    for index, topic in enumerate(topics):
        stored = {m.data(): m for m in stored_messages(broker.url, topic)}
        assert len(stored) == 1500
        for i in range(index, 3000, 2):
            value, key, properties, event = _message(i)
            msg = stored[value]
            assert (msg.partition_key() or None) == key
            assert msg.properties() == properties
            assert (msg.event_timestamp() or None) == event
