"""Writing DataFrames to topics (issue 14): batch and streaming, and the
effectively-once contract: a retried task or a rerun batch sends the same
producer names and sequence ids, so deduplication stores every row once."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from magnetar.spark_connector.options import OptionError, WriteOptions
from magnetar.spark_connector.writer import write_rows
from tests.support.brokers import BrokerThread
from tests.support.draining import stored_messages


def _topic() -> str:
    return f"persistent://public/default/spark-{uuid.uuid4().hex[:8]}"


def test_batch_write_round_trip_and_a_rerun_stores_nothing_twice(
    spark: Any, broker: BrokerThread
) -> None:
    topic = _topic()
    rows = [(f"v{i}", f"k{i % 7}", {"n": str(i)}) for i in range(500)]
    df = spark.createDataFrame(rows, "value string, key string, properties map<string,string>")
    writer = (
        df.repartition(3)
        .write.format("magnetar")
        .option("service_url", broker.url)
        .option("topic", topic)
        .option("producer_name_prefix", "job-1")
        .mode("append")
    )
    writer.save()
    writer.save()  # the same job again: every row is a duplicate
    stored = stored_messages(broker.url, topic)
    assert sorted(m.data().decode() for m in stored) == sorted(v for v, _, _ in rows)
    by_value = {m.data().decode(): m for m in stored}
    assert by_value["v10"].partition_key() == "k3"
    assert by_value["v10"].properties() == {"n": "10"}


def test_a_task_that_died_half_way_and_its_retry(broker: BrokerThread) -> None:
    """What Spark does on a task failure, driven directly: the first attempt
    sent 300 of 1,000 rows and died; the retry sends all 1,000 with the same
    producer name and batch; the topic holds each row once."""
    topic = _topic()
    options = WriteOptions(broker.url, topic, None)
    rows = pa.RecordBatch.from_pylist([{"value": b"%d" % i} for i in range(1000)])
    assert write_rows(options, iter([rows.slice(0, 300)]), "query-x-0", 7) == 300
    assert write_rows(options, iter([rows.slice(0, 600), rows.slice(600)]), "query-x-0", 7) == 1000
    assert [int(m.data()) for m in stored_messages(broker.url, topic)] == list(range(1000))


def test_streaming_write_from_files_restarts_from_its_checkpoint(
    spark: Any, broker: BrokerThread, tmp_path: Path
) -> None:
    topic = _topic()
    source = tmp_path / "in"
    source.mkdir()
    (source / "a.json").write_text("\n".join(json.dumps({"value": f"a{i}"}) for i in range(50)))

    def run() -> None:
        query = (
            spark.readStream.schema("value string")
            .json(str(source))
            .writeStream.format("magnetar")
            .option("service_url", broker.url)
            .option("topic", topic)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None

    run()
    (source / "b.json").write_text("\n".join(json.dumps({"value": f"b{i}"}) for i in range(30)))
    run()  # the same query id from the checkpoint: only the new file is written
    values = [m.data().decode() for m in stored_messages(broker.url, topic)]
    assert sorted(values) == sorted([f"a{i}" for i in range(50)] + [f"b{i}" for i in range(30)])


def test_bad_options_are_named(spark: Any, broker: BrokerThread) -> None:
    df = spark.createDataFrame([("x",)], "value string")
    with pytest.raises(Exception, match="service_url is required"):
        df.write.format("magnetar").option("topic", _topic()).mode("append").save()
    with pytest.raises(OptionError, match="unknown option"):
        WriteOptions.parse({"service_url": "u", "topic": "t", "batchsize": "3"}, ["value"])
    with pytest.raises(OptionError, match=r"client\.nosuch"):
        WriteOptions.parse({"service_url": "u", "topic": "t", "client.nosuch": "1"}, ["value"])
    parsed = WriteOptions.parse(
        {"service_url": "u", "topic": "t", "client.operation_timeout_seconds": "7"}, ["value"]
    )
    assert parsed.client == {"operation_timeout_seconds": 7}


def _failing_once(marker: Path) -> Any:
    """A UDF that makes the first attempt of the task holding row 150 fail
    after the rows before it went to the writer; `marker` records that it did."""

    def check(value: str) -> str:
        from pyspark import TaskContext

        context = TaskContext.get()
        if value == "r150" and context is not None and context.attemptNumber() == 0:
            marker.write_text("failed once")
            raise RuntimeError("injected failure")
        return value

    return check


def test_streaming_write_survives_a_failed_task_and_a_killed_query(
    spark: Any, broker: BrokerThread, tmp_path: Path
) -> None:
    """Effectively once (issue 14): a task fails after sending part of its
    rows and Spark retries it; then a query is stopped in the middle of a
    batch and restarted from its checkpoint. Every row is stored once."""
    from pyspark.sql.functions import col, udf

    topic = _topic()
    source = tmp_path / "in"
    source.mkdir()
    (source / "a.json").write_text("\n".join(json.dumps({"value": f"r{i}"}) for i in range(300)))
    marker = tmp_path / "failed-once"
    failing = udf(_failing_once(marker), "string", useArrow=False)

    def start(frame: Any) -> Any:
        return (
            frame.writeStream.format("magnetar")
            .option("service_url", broker.url)
            .option("topic", topic)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )

    stream = spark.readStream.schema("value string").json(str(source))
    query = start(stream.select(failing(col("value")).alias("value")))
    query.awaitTermination(180)
    assert query.exception() is None  # the retry succeeded
    assert marker.exists(), "the injected failure did not happen"
    # A second file, and the query stopped while writing it.
    (source / "b.json").write_text("\n".join(json.dumps({"value": f"s{i}"}) for i in range(3000)))
    query = start(stream)
    while not query.recentProgress and query.isActive:
        if query.status["isTriggerActive"]:
            break
        time.sleep(0.05)
    query.stop()
    query = start(stream)  # restarted from the checkpoint
    query.awaitTermination(180)
    assert query.exception() is None
    values = [m.data().decode() for m in stored_messages(broker.url, topic)]
    expected = [f"r{i}" for i in range(300)] + [f"s{i}" for i in range(3000)]
    assert len(values) == len(expected)
    assert sorted(values) == sorted(expected)
