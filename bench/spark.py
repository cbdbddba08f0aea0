"""The Spark connector's write overhead (issue 14): rows/s of a batch write of
100-byte values through `.format("magnetar")` (local[2], two partitions, two
producers, unbatched with explicit sequence ids: the effectively-once set-up)
next to our blocking client sending the same messages the same way from one
thread, on the same broker (fsync, deduplication on)."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

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


def _spark_rates(url: str, count: int) -> tuple[float, float, str]:
    """(write rows/s, read rows/s, the topic written)."""
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
        write_rate = count / (time.perf_counter() - start)
        reading = spark.read.format("magnetar").option("service_url", url).option("topic", topic)
        start = time.perf_counter()
        read = reading.load().count()
        read_rate = read / (time.perf_counter() - start)
        return write_rate, read_rate, topic
    finally:
        spark.stop()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--spark-count", type=int, default=200_000)
    args, _ = parser.parse_known_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        settings = {"broker_deduplication_enabled": "true"}
        with start_broker("magnetar-fsync", Path(tmp), settings) as broker:
            plain = _client_rate(broker.url, args.spark_count)
            spark_write, spark_read, topic = _spark_rates(broker.url, args.spark_count)
            plain_read = _reader_rate(broker.url, topic, args.spark_count)
    print("| 100 B rows, fsync, dedup on | rows/s | vs our client |")
    print("|---|---|---|")
    print(f"| write: magnetar.client, one thread, unbatched, sequence ids | {plain:,.0f} | |")
    print(f"| write: Spark batch, local[2], 2 partitions | {spark_write:,.0f} "
          f"| {spark_write / plain:.2f} |")  # fmt: skip
    print(f"| read: magnetar.client reader, one thread | {plain_read:,.0f} | |")
    print(f"| read: Spark batch, one topic partition | {spark_read:,.0f} "
          f"| {spark_read / plain_read:.2f} |")  # fmt: skip
    return 0
