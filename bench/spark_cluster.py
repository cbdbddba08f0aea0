"""The connector on a Spark standalone cluster (issue 46.5): a master and two
one-core workers on loopback (tests/support/spark_cluster.py), this process
the driver. Messages/s of writing `count` rows of 100-byte values from
`spark.range` to a topic of 8 partitions, and of reading that topic back
(batch into the noop sink, batch count(), streaming availableNow into noop),
per executor core, against our blocking client alone in one process on a
topic of the same shape in the same run: a producer writing (unbatched,
sequence ids, as the connector writes) and a reader reading the 8 partitions
one after another (and, for reference, the async core's reader, which the
connector's tasks use). Broker: fsync, deduplication on (the connector's
effectively-once set-up). Spark times are of jobs on a warm application
(planning, task start and each task's client set-up included): a first small
write and read start the executors' Python workers, and their time is shown
apart. The machine's cores are shared by the broker, the JVMs, the Python
workers and this driver.

    python -m bench spark-cluster -- --spark-count 200000
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from bench.compare import start_broker

PAYLOAD = b"x" * 100
PARTITIONS = 8
WORKERS, CORES = 2, 1
WRITE_TASKS = WORKERS * CORES


def _partitioned_topic(http_port: int, name: str) -> str:
    """A new topic of PARTITIONS partitions (the admin API may take a moment
    to listen after the binary port does)."""
    topic = f"persistent://public/default/{name}-{uuid.uuid4().hex[:8]}"
    request = urllib.request.Request(
        f"http://127.0.0.1:{http_port}/admin/v2/{topic.replace('://', '/')}/partitions",
        data=json.dumps(PARTITIONS).encode(),
        method="PUT",
        headers={"Content-Type": "application/json"},
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(request, timeout=10):
                return topic
        except (urllib.error.URLError, ConnectionError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _client_write(url: str, topic: str, count: int) -> float:
    """One producer on the partitioned topic (round robin), unbatched, with
    sequence ids, resending until stored: how each connector task writes."""
    from magnetar.client import Client

    client = Client(url, operation_timeout_seconds=30)
    try:
        producer = client.create_producer(
            topic,
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


def _client_read(url: str, topic: str, count: int) -> float:
    """A reader per partition, one after another, each to the last message."""
    from magnetar.client import Client, MessageId

    client = Client(url, operation_timeout_seconds=30)
    try:
        read = 0
        start = time.perf_counter()
        for partition in client.get_topic_partitions(topic):
            reader = client.create_reader(partition, MessageId.earliest)
            last = reader.get_last_message_id()
            if last.entry_id() >= 0:
                while reader.read_next(30_000).message_id() < last:
                    read += 1
                read += 1
            reader.close()
        elapsed = time.perf_counter() - start
        if read != count:
            raise RuntimeError(f"the reader read {read} messages of {count}")
        return count / elapsed
    finally:
        client.close()


def _core_read(url: str, topic: str, count: int) -> float:
    """As _client_read, through the async core's readers on one event loop."""
    import asyncio

    from magnetar.client import aio

    async def read_all() -> float:
        client = aio.Client(url, operation_timeout_seconds=30)
        try:
            read = 0
            start = time.perf_counter()
            for partition in await client.get_topic_partitions(topic):
                reader = await client.create_reader(partition, aio.MessageId.earliest)
                last = (await reader.get_last_message_id()).position()
                if last[1] >= 0:
                    while (await reader.read_next(30_000)).proto_message_id().position() < last:
                        read += 1
                    read += 1
                await reader.close()
            elapsed = time.perf_counter() - start
        finally:
            await client.close()
        if read != count:
            raise RuntimeError(f"the core reader read {read} messages of {count}")
        return count / elapsed

    return asyncio.run(read_all())


def _session(master: str) -> Any:
    from pyspark.sql import SparkSession

    from magnetar import spark_connector

    spark = (
        SparkSession.builder.master(master)
        .appName("magnetar-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.executor.memory", "512m")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark_connector.register(spark)
    return spark


def _timed(action: Any) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def _writer(spark: Any, url: str, topic: str, count: int) -> Any:
    rows = spark.range(count, numPartitions=WRITE_TASKS).selectExpr("repeat('x', 100) AS value")
    return (
        rows.write.format("magnetar")
        .option("service_url", url)
        .option("topic", topic)
        .option("producer_name_prefix", uuid.uuid4().hex[:8])
        .mode("append")
    )


def _warm_up(spark: Any, url: str, topic: str) -> float:
    """Seconds of a first small write and read: they start the executors'
    Python workers, which later jobs reuse."""

    def jobs() -> None:
        _writer(spark, url, topic, 1000).save()
        load = spark.read.format("magnetar").option("service_url", url).option("topic", topic)
        load.load().write.format("noop").mode("overwrite").save()

    return _timed(jobs)


def _spark_rates(spark: Any, url: str, topic: str, count: int, work: Path) -> dict[str, float]:
    rates: dict[str, float] = {}
    rates["batch write"] = count / _timed(_writer(spark, url, topic, count).save)

    def reading() -> Any:
        return spark.read.format("magnetar").option("service_url", url).option("topic", topic)

    noop = reading().load().write.format("noop").mode("overwrite")
    rates["batch read"] = count / _timed(noop.save)
    counted: list[int] = []
    rates["batch count"] = count / _timed(lambda: counted.append(reading().load().count()))
    if counted != [count]:
        raise RuntimeError(f"Spark counted {counted[0]} rows of {count}")

    query = (
        spark.readStream.format("magnetar")
        .option("service_url", url)
        .option("topic", topic)
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(work / "read-checkpoint"))
        .trigger(availableNow=True)
    )

    def stream() -> None:
        started = query.start()
        started.awaitTermination()
        if started.exception() is not None:
            raise RuntimeError(str(started.exception()))

    rates["stream read"] = count / _timed(stream)
    return rates


def measure(count: int) -> tuple[dict[str, float], dict[str, float]]:
    """Our client's write and read rates, and the connector's on the cluster
    (with "warm-up": the seconds of the first jobs)."""
    from tests.support.spark_cluster import SparkCluster, spark_env

    os.environ.update(spark_env())  # this process is the driver
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        settings = {"broker_deduplication_enabled": "true"}
        with start_broker("magnetar-fsync", work, settings) as broker:
            plain_topic = _partitioned_topic(broker.http_port, "plain")
            spark_topic = _partitioned_topic(broker.http_port, "spark")
            warm_topic = _partitioned_topic(broker.http_port, "warm")
            client = {"write": _client_write(broker.url, plain_topic, count)}
            with SparkCluster(work / "spark", workers=WORKERS, cores=CORES) as cluster:
                spark = _session(cluster.master_url)
                try:
                    warm_up = _warm_up(spark, broker.url, warm_topic)
                    rates = _spark_rates(spark, broker.url, spark_topic, count, work)
                    rates["warm-up"] = warm_up
                finally:
                    spark.stop()
            client["read"] = _client_read(broker.url, spark_topic, count)
            client["core read"] = _core_read(broker.url, spark_topic, count)
    return client, rates


ROWS = (
    ("write", "batch write", f"df.write from spark.range, {WRITE_TASKS} tasks"),
    ("read", "batch read", f"spark.read into noop, {PARTITIONS} tasks"),
    ("read", "batch count", "spark.read ... count()"),
    ("read", "stream read", "readStream availableNow into noop"),
)


def report(count: int, client: dict[str, float], spark: dict[str, float]) -> None:
    cores = WORKERS * CORES
    print(
        f"| {count:,} msgs of 100 B, {PARTITIONS} partitions, fsync, dedup on; "
        f"Spark standalone, {WORKERS} workers x {CORES} core | msgs/s "
        "| per executor core | per core / our client |"
    )
    print("|---|---|---|---|")
    print(f"| write: magnetar.client producer, one process | {client['write']:,.0f} | | |")
    print(f"| read: magnetar.client reader, one process | {client['read']:,.0f} | | |")
    print(
        "| read (reference): magnetar.client.aio reader, one process, the connector's "
        f"path | {client['core read']:,.0f} | | |"
    )
    for kind, name, label in ROWS:
        rate = spark[name]
        per_core = rate / cores
        print(
            f"| {kind}: Spark {label} | {rate:,.0f} | {per_core:,.0f} "
            f"| {per_core / client[kind]:.2f} |"
        )
    print(
        f"\nWarm-up (not in the rows): the application's first write and read of 1,000 "
        f"messages took {spark['warm-up']:.1f} s (starting the executors' Python workers)."
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--spark-count", type=int, default=1_000_000)
    args, _ = parser.parse_known_args(argv)
    client, spark = measure(args.spark_count)
    report(args.spark_count, client, spark)
    return 0
