"""The Spark connector's overhead (issue 14): rows/s of streaming and batch
writes and reads of 100-byte values through `.format("magnetar")` (local[2];
writes: two tasks, two producers, unbatched with explicit sequence ids, the
effectively-once set-up) next to our blocking client doing the same from one
thread, on the same broker (fsync, deduplication on). Streaming figures are
availableNow queries timed from start to end, as a scheduled job runs them."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.compare import start_broker

PAYLOAD = b"x" * 100


def _client_rate(url: str, count: int) -> float:
    from magnetar.client import Client

    client = Client(url, operation_timeout_seconds=30)
    try:
        producer = client.create_producer(
            f"persistent://public/default/plain-{uuid.uuid4().hex[:8]}",
            producer_name=f"plain-{uuid.uuid4().hex[:6]}",
            batching_enabled=False,
            block_if_queue_full=True,
            send_timeout_millis=0,
        )
        start = time.perf_counter()
        for index in range(count):
            producer.send_async(PAYLOAD, None, sequence_id=index)
        producer.flush()
        return count / (time.perf_counter() - start)
    finally:
        client.close()


def _reader_rate(url: str, topic: str, count: int) -> float:
    from magnetar.client import Client, MessageId

    client = Client(url, operation_timeout_seconds=30)
    try:
        reader = client.create_reader(topic, MessageId.earliest)
        start = time.perf_counter()
        for _ in range(count):
            reader.read_next(30_000)
        return count / (time.perf_counter() - start)
    finally:
        client.close()


def _session() -> Any:
    from pyspark.sql import SparkSession

    from magnetar import spark_connector

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark_connector.register(spark)
    return spark


def stream_to_noop(spark: Any, url: str, topic: str, checkpoint: Path) -> Any:
    """A streaming read of `topic` into the noop sink, all available at once."""
    return (
        spark.readStream.format("magnetar")
        .option("service_url", url)
        .option("topic", topic)
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
    )


def timed_query(query: Any) -> float:
    """Seconds from start to the end of an availableNow query (start included:
    that is what a scheduled job pays)."""
    start = time.perf_counter()
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return time.perf_counter() - start


def _spark_rates(url: str, count: int, work: Path) -> tuple[dict[str, float], str]:
    """Rows/s of batch and streaming writes and reads, and the topic read."""
    spark = _session()
    rates: dict[str, float] = {}
    try:
        df = spark.range(count, numPartitions=2).selectExpr("repeat('x', 100) AS value").cache()
        df.count()  # materialised first: only the write is timed
        topic = f"persistent://public/default/spark-{uuid.uuid4().hex[:8]}"
        writer = (
            df.write.format("magnetar")
            .option("service_url", url)
            .option("topic", topic)
            .option("producer_name_prefix", uuid.uuid4().hex[:8])
            .mode("append")
        )
        start = time.perf_counter()
        writer.save()
        rates["batch write"] = count / (time.perf_counter() - start)

        files = work / "rows"
        df.write.parquet(str(files))  # the streaming write's input: two files
        started = (
            spark.readStream.schema("value string")
            .parquet(str(files))
            .writeStream.format("magnetar")
            .option("service_url", url)
            .option("topic", f"persistent://public/default/stream-{uuid.uuid4().hex[:8]}")
            .option("checkpointLocation", str(work / "write-checkpoint"))
            .trigger(availableNow=True)
        )
        rates["stream write"] = count / timed_query(started.start())

        reading = spark.read.format("magnetar").option("service_url", url).option("topic", topic)
        start = time.perf_counter()
        read = reading.load().count()
        rates["batch read"] = read / (time.perf_counter() - start)

        streamed = stream_to_noop(spark, url, topic, work / "read-checkpoint")
        rates["stream read"] = count / timed_query(streamed.start())
        return rates, topic
    finally:
        spark.stop()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--spark-count", type=int, default=200_000)
    args, _ = parser.parse_known_args(argv)
    count = args.spark_count
    with tempfile.TemporaryDirectory() as tmp:
        settings = {"broker_deduplication_enabled": "true"}
        with start_broker("magnetar-fsync", Path(tmp), settings) as broker:
            plain = _client_rate(broker.url, count)
            spark, topic = _spark_rates(broker.url, count, Path(tmp))
            plain_read = _reader_rate(broker.url, topic, count)
    print(f"| {count:,} rows of 100 B, fsync, dedup on | rows/s | vs our client |")
    print("|---|---|---|")
    print(f"| write: magnetar.client, one thread, unbatched, sequence ids | {plain:,.0f} | |")
    for name, label in (
        ("stream write", "writeStream availableNow from Parquet, 2 tasks (start included)"),
        ("batch write", "df.write, 2 partitions"),
    ):
        print(f"| write: Spark {label} | {spark[name]:,.0f} | {spark[name] / plain:.2f} |")
    print(f"| read: magnetar.client reader, one thread | {plain_read:,.0f} | |")
    for name, label in (
        ("stream read", "readStream availableNow into noop, one topic partition (start included)"),
        ("batch read", "spark.read, one topic partition"),
    ):
        print(f"| read: Spark {label} | {spark[name]:,.0f} | {spark[name] / plain_read:.2f} |")
    return 0
