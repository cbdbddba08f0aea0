"""Driver programs the cluster tests submit (issue 46): each runs in its own
process, as a user's pipeline does, with `master("spark://...")`, so its
tasks run in the workers' executor JVMs and their Python workers. It prints
one JSON line with what it saw.

    python -m tests.integration.spark.cluster_jobs <master URL> <job> '<json args>'
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any


def _session(master: str) -> Any:
    from pyspark.sql import SparkSession

    from magnetar import spark_connector

    session = (
        SparkSession.builder.master(master)
        .appName("magnetar-cluster-test")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.executor.memory", "512m")
        .config("spark.task.maxFailures", "4")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    spark_connector.register(session)
    return session


def _pids(_rows: Iterator[Any]) -> Iterator[int]:
    yield os.getpid()


def _finish(query: Any, args: dict[str, Any]) -> dict[str, Any]:
    """Wait for a query's end; its failure, if any, as text."""
    from pyspark.errors import StreamingQueryException

    timeout = int(args.get("timeout", 240))
    with contextlib.suppress(StreamingQueryException):
        if not query.awaitTermination(timeout):
            return {"failure": f"the query did not end within {timeout} s"}
    failure = query.exception()
    return {"failure": None if failure is None else str(failure)}


def write_then_read(spark: Any, args: dict[str, Any]) -> dict[str, Any]:
    """Batch write `count` rows in `partitions` tasks, then batch read the
    topic back; the pids of the processes the tasks ran in."""
    count, url, topic = int(args["count"]), args["service_url"], args["topic"]
    options = args.get("options", {})
    rows = [(f"v{i}", f"k{i % 5}") for i in range(count)]
    df = spark.createDataFrame(rows, "value string, key string").repartition(
        int(args["partitions"])
    )
    (
        df.write.format("magnetar")
        .option("service_url", url)
        .option("topic", topic)
        .option("producer_name_prefix", "cluster-job")
        .options(**options)
        .mode("append")
        .save()
    )
    read = (
        spark.read.format("magnetar")
        .option("service_url", url)
        .option("topic", topic)
        .options(**options)
        .load()
    )
    values = sorted(r.value.decode() for r in read.select("value").collect())
    pids = sorted(set(df.rdd.mapPartitions(_pids).collect()))
    return {"values": values, "task_pids": pids, "driver_pid": os.getpid()}


def stream_write(spark: Any, args: dict[str, Any]) -> dict[str, Any]:
    """A streaming write of the JSON files in `source` (a few files per
    micro-batch, 2 partitions each) to `topic`, run until all are written."""
    query = (
        spark.readStream.schema("value string")
        .option("maxFilesPerTrigger", int(args["files_per_trigger"]))
        .json(args["source"])
        .repartition(2)
        .writeStream.format("magnetar")
        .option("service_url", args["service_url"])
        .option("topic", args["topic"])
        .option("checkpointLocation", args["checkpoint"])
        .trigger(availableNow=True)
        .start()
    )
    return _finish(query, args)


def stream_read(spark: Any, args: dict[str, Any]) -> dict[str, Any]:
    """A streaming read (availableNow) with the connector options in
    `options` (topic or topics_pattern, subscription, ...) into a JSON file
    sink at `output`: each row's value as a string and its topic."""
    query = (
        spark.readStream.format("magnetar")
        .option("service_url", args["service_url"])
        .options(**args["options"])
        .load()
        .selectExpr("CAST(value AS STRING) AS value", "topic")
        .writeStream.format("json")
        .option("path", args["output"])
        .option("checkpointLocation", args["checkpoint"])
        .trigger(availableNow=True)
        .start()
    )
    return _finish(query, args)


JOBS: dict[str, Callable[[Any, dict[str, Any]], dict[str, Any]]] = {
    "write_then_read": write_then_read,
    "stream_write": stream_write,
    "stream_read": stream_read,
}


def main(argv: list[str]) -> int:
    master, job, raw = argv
    spark = _session(master)
    try:
        print(json.dumps(JOBS[job](spark, json.loads(raw))), flush=True)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
