"""The connector on a Spark standalone cluster (issue 46.5): a master and
one-core workers (one by default) on loopback (tests/support/spark_cluster.py),
this process the driver. Messages/s of writing `count` rows of 100-byte values from
`spark.range` to a topic of 8 partitions, and of reading that topic back
(batch into the noop sink, batch count(), streaming availableNow into noop;
and, for reference, batch into noop through bench/spark_rows.py, which hands
Spark a tuple per message instead of Arrow record batches),
per executor core, against our client alone in one process on a topic of the
same shape in the same run. The peers: for reads, the async core's readers
(`magnetar.client.aio`, the fastest way our client reads, one partition
after another); for writes, a producer with the guarantee the connector
gives (the async core's producer, unbatched, sequence ids, resent until
stored; the blocking client's producer, and a batched one, are shown for
reference: the connector cannot batch, as a retried task would cut its
batches elsewhere and deduplication works per batch). Broker: fsync,
deduplication on. Spark times are of jobs on a warm application (planning,
task start and each task's client set-up included): a first small write and
read start the executors' Python workers, and their time is shown apart.

Per executor core, two ways: the rate over the executors' cores (nominal;
on a 2-core machine with two workers, the broker, the JVMs, the Python
workers and the driver share the two cores, so it understates what a core
does; with `--spark-workers 1` the broker has about a core of its own, as
beside the peer), and the messages per CPU-second the executors spent (the
executor JVMs with their Python workers, from /proc before and after each
job) against our client's messages per CPU-second of its process. The
broker's CPU is in neither.

    python -m bench spark-cluster -- --spark-count 200000 --spark-workers 1
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import spark_rows
from bench.compare import start_broker
from bench.spark import stream_to_noop, timed_query

PAYLOAD = b"x" * 100
PARTITIONS = 8
CORES = 1  # per worker


@dataclass(frozen=True)
class Figure:
    """A job's messages per second, and per CPU-second of the processes that ran it."""

    rate: float
    per_cpu: float

    @classmethod
    def of(cls, count: int, seconds: float, cpu_seconds: float) -> Figure:
        return cls(count / seconds, count / max(cpu_seconds, 1e-9))


def tree_cpu(roots: Iterable[int]) -> float:
    """CPU seconds of the processes under `roots`, roots included. A child
    that exited counts in the parent that reaped it, so nothing is counted
    twice and only a process whose reaper also exited is lost."""
    from tests.support.spark_cluster import processes

    table = processes()
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    total, stack = 0.0, [pid for pid in roots if pid in table]
    while stack:
        pid = stack.pop()
        total += table[pid][1]
        stack.extend(children.get(pid, ()))
    return total


def _partitioned_topic(http_port: int, name: str) -> str:
    """A new topic of PARTITIONS partitions."""
    topic = f"persistent://public/default/{name}-{uuid.uuid4().hex[:8]}"
    request = urllib.request.Request(
        f"http://127.0.0.1:{http_port}/admin/v2/{topic.replace('://', '/')}/partitions",
        data=json.dumps(PARTITIONS).encode(),
        method="PUT",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10):
        return topic


def _in_process(count: int, work: Callable[[], int]) -> Figure:
    """Time `work` (which returns the messages it moved) in this process."""
    wall, cpu = time.perf_counter(), time.process_time()
    moved = work()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if moved != count:
        raise RuntimeError(f"our client moved {moved} messages of {count}")
    return Figure.of(count, wall, cpu)


def _client_write(url: str, topic: str, count: int, *, batched: bool) -> Figure:
    """One producer on the partitioned topic (round robin) with sequence ids,
    resending until stored; unbatched is how each connector task writes."""
    from magnetar.client import Client

    client = Client(url, operation_timeout_seconds=30)
    try:
        producer = client.create_producer(
            topic,
            producer_name=f"plain-{uuid.uuid4().hex[:6]}",
            batching_enabled=batched,
            block_if_queue_full=True,
            send_timeout_millis=0,
        )

        def write() -> int:
            for index in range(count):
                producer.send_async(PAYLOAD, None, sequence_id=index)
            producer.flush()
            return count

        return _in_process(count, write)
    finally:
        client.close()


def _core_write(url: str, topic: str, count: int) -> Figure:
    """As _client_write unbatched, through the async core's producer on one
    event loop, queueing while it has capacity: how each connector task
    writes."""
    import asyncio

    from magnetar.client import aio

    async def write_all() -> int:
        client = aio.Client(url, operation_timeout_seconds=30)
        try:
            conf = aio.ProducerConfiguration(
                producer_name=f"core-{uuid.uuid4().hex[:6]}",
                batching_enabled=False,
                send_timeout_millis=0,
            )
            producer = await client.create_producer(topic, conf)
            failures: list[object] = []

            def answered(error: object, _msg_id: object) -> None:
                if error is not None:
                    failures.append(error)

            for index in range(count):
                msg = aio.OutgoingMessage(PAYLOAD, sequence_id=index)
                target = (
                    producer.route(msg)
                    if isinstance(producer, aio.PartitionedProducer)
                    else producer
                )
                if not target.has_capacity():
                    await target.wait_for_capacity()
                target.send_async(msg, answered)
            await producer.flush()
            if failures:
                raise RuntimeError(f"{len(failures)} sends failed: {failures[0]}")
            return count
        finally:
            await client.close()

    return _in_process(count, lambda: asyncio.run(write_all()))


def _client_read(url: str, topic: str, count: int) -> Figure:
    """The blocking client's reader per partition, one after another."""
    from magnetar.client import Client, MessageId

    client = Client(url, operation_timeout_seconds=30)

    def read() -> int:
        read = 0
        for partition in client.get_topic_partitions(topic):
            reader = client.create_reader(partition, MessageId.earliest)
            last = reader.get_last_message_id()
            if last.entry_id() >= 0:
                while reader.read_next(30_000).message_id() < last:
                    read += 1
                read += 1
            reader.close()
        return read

    try:
        return _in_process(count, read)
    finally:
        client.close()


def _core_read(url: str, topic: str, count: int) -> Figure:
    """As _client_read, through the async core's readers on one event loop."""
    import asyncio

    from magnetar.client import aio

    async def read_all() -> int:
        client = aio.Client(url, operation_timeout_seconds=30)
        try:
            read = 0
            for partition in await client.get_topic_partitions(topic):
                reader = await client.create_reader(partition, aio.MessageId.earliest)
                last = (await reader.get_last_message_id()).position()
                if last[1] >= 0:
                    while (await reader.read_next(30_000)).proto_message_id().position() < last:
                        read += 1
                    read += 1
                await reader.close()
            return read
        finally:
            await client.close()

    return _in_process(count, lambda: asyncio.run(read_all()))


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
    spark_rows.register(spark)
    return spark


def _timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def _job(count: int, executors: list[int], action: Callable[[], object]) -> Figure:
    """Time a Spark job, and the CPU its executors spent on it."""
    cpu = tree_cpu(executors)
    wall = _timed(action)
    return Figure.of(count, wall, tree_cpu(executors) - cpu)


def _writer(spark: Any, url: str, topic: str, count: int) -> Any:
    """A write of `count` rows in as many tasks as the cluster has cores."""
    tasks = int(spark.sparkContext.defaultParallelism)
    rows = spark.range(count, numPartitions=tasks).selectExpr("repeat('x', 100) AS value")
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


def _spark_figures(
    spark: Any, url: str, topic: str, count: int, work: Path, executors: list[int]
) -> dict[str, Figure]:
    figures = {"batch write": _job(count, executors, _writer(spark, url, topic, count).save)}

    def reading() -> Any:
        return spark.read.format("magnetar").option("service_url", url).option("topic", topic)

    noop = reading().load().write.format("noop").mode("overwrite")
    figures["batch read"] = _job(count, executors, noop.save)
    rows = reading().format("magnetar-rows").load().write.format("noop").mode("overwrite")
    figures["batch read rows"] = _job(count, executors, rows.save)
    counted: list[int] = []
    figures["batch count"] = _job(
        count, executors, lambda: counted.append(reading().load().count())
    )
    if counted != [count]:
        raise RuntimeError(f"Spark counted {counted[0]} rows of {count}")

    query = stream_to_noop(spark, url, topic, work / "read-checkpoint")
    figures["stream read"] = _job(count, executors, lambda: timed_query(query.start()))
    return figures


def measure(count: int, workers: int) -> tuple[dict[str, Figure], dict[str, Figure], float]:
    """Our client's figures, the connector's on the cluster, and the seconds
    of the first jobs (warm-up)."""
    from tests.support.spark_cluster import SparkCluster, spark_env

    os.environ.update(spark_env())  # this process is the driver
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        settings = {"broker_deduplication_enabled": "true"}
        with start_broker("magnetar-fsync", work, settings) as broker:
            topics = {
                name: _partitioned_topic(broker.http_port, name)
                for name in ("core", "plain", "batched", "spark", "warm")
            }
            client = {
                "write": _core_write(broker.url, topics["core"], count),
                "blocking write": _client_write(broker.url, topics["plain"], count, batched=False),
                "batched write": _client_write(broker.url, topics["batched"], count, batched=True),
            }
            with SparkCluster(work / "spark", workers=workers, cores=CORES) as cluster:
                spark = _session(cluster.master_url)
                try:
                    warm_up = _warm_up(spark, broker.url, topics["warm"])
                    executors = cluster.executor_pids()
                    figures = _spark_figures(
                        spark, broker.url, topics["spark"], count, work, executors
                    )
                finally:
                    spark.stop()
            client["read"] = _core_read(broker.url, topics["spark"], count)
            client["blocking read"] = _client_read(broker.url, topics["spark"], count)
    return client, figures, warm_up


ROWS = (
    ("write", "batch write", "df.write from spark.range, a task per core"),
    ("read", "batch read", f"spark.read into noop, {PARTITIONS} tasks"),
    ("read", "batch read rows", "spark.read into noop, a tuple per message (reference)"),
    ("read", "batch count", "spark.read ... count()"),
    ("read", "stream read", "readStream availableNow into noop"),
)
PEERS = (
    ("write", "magnetar.client.aio producer, unbatched, sequence ids (the peer for writes)"),
    ("blocking write", "blocking client's producer, unbatched, sequence ids (reference)"),
    ("batched write", "blocking client's producer, batched (reference)"),
    ("read", "magnetar.client.aio readers (the peer for reads)"),
    ("blocking read", "blocking client's readers (reference)"),
)


def report(
    count: int, workers: int, client: dict[str, Figure], spark: dict[str, Figure], warm_up: float
) -> None:
    cores = workers * CORES
    print(
        f"| {count:,} msgs of 100 B, {PARTITIONS} partitions, fsync, dedup on; "
        f"Spark standalone, {workers} worker(s) x {CORES} core | msgs/s | msgs per CPU-s "
        "| per executor core / peer | per CPU-s / peer |"
    )
    print("|---|---|---|---|---|")
    for name, label in PEERS:
        figure = client[name]
        print(
            f"| magnetar.client, one process: {label} "
            f"| {figure.rate:,.0f} | {figure.per_cpu:,.0f} | | |"
        )
    for kind, name, label in ROWS:
        figure, peer = spark[name], client[kind]
        print(
            f"| Spark {label} | {figure.rate:,.0f} | {figure.per_cpu:,.0f} "
            f"| {figure.rate / cores / peer.rate:.2f} "
            f"| {figure.per_cpu / peer.per_cpu:.2f} |"
        )
    arrow, rows = spark["batch read"], spark["batch read rows"]
    print(
        f"\nArrow record batches over tuples (spark.read into noop): "
        f"{arrow.rate / rows.rate:.2f}x messages/s, {arrow.per_cpu / rows.per_cpu:.2f}x "
        "messages per executor CPU-second."
    )
    print(
        f"Warm-up (not in the rows): the application's first write and read of 1,000 "
        f"messages took {warm_up:.1f} s (starting the executors' Python workers)."
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--spark-count", type=int, default=1_000_000)
    parser.add_argument(
        "--spark-workers",
        type=int,
        default=1,
        help="one-core workers (the default, 1, leaves the broker a core of its own on a "
        "2-core machine, as the peer has; more share the cores with it)",
    )
    args, _ = parser.parse_known_args(argv)
    client, spark, warm_up = measure(args.spark_count, args.spark_workers)
    report(args.spark_count, args.spark_workers, client, spark, warm_up)
    return 0
