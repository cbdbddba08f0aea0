"""Reading topics with Spark (issue 14): batch reads of a partitioned topic
from earliest, latest and JSON offsets; streaming reads whose micro-batches
honour max_messages_per_trigger (availableNow and processing-time triggers);
a query stopped and restarted from its checkpoint reads every message once."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pulsar
import pytest

from tests.support.brokers import BrokerThread
from tests.support.spark_topics import create_partitioned, produce

PARTITIONS = 3


def _partitioned(broker: BrokerThread) -> str:
    topic = f"persistent://public/default/sread-{uuid.uuid4().hex[:8]}"
    create_partitioned(broker, topic, PARTITIONS)
    return topic


def _reader(spark: Any, broker: BrokerThread, topic: str, **options: str) -> Any:
    read = spark.read.format("magnetar").option("service_url", broker.url).option("topic", topic)
    for key, value in options.items():
        read = read.option(key, value)
    return read.load()


def test_batch_read_earliest_latest_and_json(spark: Any, broker: BrokerThread) -> None:
    topic = _partitioned(broker)
    values = [f"v{i}" for i in range(60)]
    produce(broker, topic, values, with_property=True)
    rows = _reader(spark, broker, topic).collect()
    assert sorted(r.value.decode() for r in rows) == sorted(values)
    row = next(r for r in rows if r.value == b"v7")
    assert row.key == "v7" and row.properties == {"v": "v7"}
    assert row.topic.startswith(f"{topic}-partition-")
    official_id = pulsar.MessageId.deserialize(bytes(row.message_id))
    assert row.topic == f"{topic}-partition-{official_id.partition()}"
    assert row.publish_time is not None and row.redelivery_count == 0
    assert _reader(spark, broker, topic, starting_offsets="latest").count() == 0
    # JSON: partition 0 from its first message up to its second; the others not at all.
    first = sorted(
        (r for r in rows if r.topic.endswith("-partition-0")),
        key=lambda r: pulsar.MessageId.deserialize(bytes(r.message_id)).entry_id(),
    )
    second = pulsar.MessageId.deserialize(bytes(first[1].message_id))
    ending = {f"{topic}-partition-{i}": [-1, -1, -1] for i in range(PARTITIONS)}
    ending[f"{topic}-partition-0"] = [second.ledger_id(), second.entry_id(), -1]
    picked = _reader(spark, broker, topic, ending_offsets=json.dumps(ending)).collect()
    assert [r.value for r in picked] == [first[0].value, first[1].value]


def _stream(
    spark: Any, broker: BrokerThread, topic: str, checkpoint: Path, seen: list[list[bytes]],
    trigger: dict[str, Any], limit: int,
) -> Any:  # fmt: skip
    def collect(batch: Any, _batch_id: int) -> None:
        seen.append([r.value for r in batch.collect()])

    return (
        spark.readStream.format("magnetar")
        .option("service_url", broker.url)
        .option("topic", topic)
        .option("max_messages_per_trigger", str(limit))
        .load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(**trigger)
        .start()
    )


def test_streaming_available_now_limits_batches_and_restarts_once(
    spark: Any, broker: BrokerThread, tmp_path: Path
) -> None:
    topic = _partitioned(broker)
    produce(broker, topic, [f"a{i}" for i in range(50)], with_property=True)
    seen: list[list[bytes]] = []
    checkpoint = tmp_path / "checkpoint"
    query = _stream(spark, broker, topic, checkpoint, seen, {"availableNow": True}, 12)
    query.awaitTermination(180)
    assert query.exception() is None
    assert all(len(batch) <= 12 for batch in seen) and len(seen) >= 5
    produce(broker, topic, [f"b{i}" for i in range(20)], with_property=True)
    query = _stream(spark, broker, topic, checkpoint, seen, {"availableNow": True}, 12)
    query.awaitTermination(180)
    values = [v.decode() for batch in seen for v in batch]
    assert sorted(values) == sorted([f"a{i}" for i in range(50)] + [f"b{i}" for i in range(20)])


def test_streaming_processing_time_trigger(
    spark: Any, broker: BrokerThread, tmp_path: Path
) -> None:
    topic = _partitioned(broker)
    seen: list[list[bytes]] = []
    query = _stream(
        spark, broker, topic, tmp_path / "cp", seen, {"processingTime": "500 milliseconds"}, 10
    )
    try:
        produce(broker, topic, [f"p{i}" for i in range(25)], with_property=True)
        deadline = time.monotonic() + 120
        while sum(len(b) for b in seen) < 25:
            assert time.monotonic() < deadline, f"only {sum(len(b) for b in seen)} of 25"
            time.sleep(0.2)
    finally:
        query.stop()
    assert all(len(batch) <= 10 for batch in seen)
    assert sorted(v.decode() for b in seen for v in b) == sorted(f"p{i}" for i in range(25))


def test_read_options_are_checked(spark: Any, broker: BrokerThread) -> None:
    with pytest.raises(Exception, match="exactly one of the options topic, topics"):
        spark.read.format("magnetar").option("service_url", broker.url).load().collect()
    with pytest.raises(Exception, match="unknown option"):
        _reader(spark, broker, "t", startingoffsets="earliest").collect()
