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


def _spark_rate(url: str, count: int) -> float:
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
        writer = (
            df.write.format("magnetar")
            .option("service_url", url)
            .option("topic", f"persistent://public/default/spark-{uuid.uuid4().hex[:8]}")
            .option("producer_name_prefix", uuid.uuid4().hex[:8])
            .mode("append")
        )
        start = time.perf_counter()
        writer.save()
        return count / (time.perf_counter() - start)
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
            spark = _spark_rate(broker.url, args.spark_count)
    print("| write 100 B rows, unbatched, explicit sequence ids, dedup on | rows/s |")
    print("|---|---|")
    print(f"| magnetar.client, one thread | {plain:,.0f} |")
    print(f"| Spark batch write, local[2], 2 partitions | {spark:,.0f} |")
    print(f"| Spark / client | {spark / plain:.2f} |")
    return 0
