"""A Spark pipeline over Magnetar: read a topic, transform, write another,
effectively once. Run a broker first (`make run`), then:

    .venv/bin/python examples/spark_pipeline.py

On a Spark standalone cluster (`make spark-cluster` prints its URL):

    SPARK_MASTER=spark://127.0.0.1:<port> .venv/bin/python examples/spark_pipeline.py

It turns deduplication on for public/default (the write side's contract),
puts a few orders on `orders`, runs the query once with availableNow (its
checkpoint under ./data/example-checkpoint makes a second run read only what
is new), and prints what `orders-shouted` holds.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request

from pyspark.sql import SparkSession
from pyspark.sql.functions import col, upper

from magnetar import client as pulsar, spark_connector

SERVICE_URL = os.environ.get("MAGNETAR_URL", "pulsar://127.0.0.1:6650")
ADMIN_URL = os.environ.get("MAGNETAR_ADMIN", "http://127.0.0.1:8080")
SOURCE = "persistent://public/default/orders"
SINK = "persistent://public/default/orders-shouted"
SPARK_MASTER = os.environ.get("SPARK_MASTER", "local[2]")
# Absolute: on a cluster, executors run in their workers' directories.
CHECKPOINT = os.path.abspath("data/example-checkpoint")


def enable_deduplication() -> None:
    request = urllib.request.Request(
        f"{ADMIN_URL}/admin/v2/namespaces/public/default/deduplication",
        data=json.dumps(True).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    urllib.request.urlopen(request, timeout=10).close()


def seed() -> None:
    client = pulsar.Client(SERVICE_URL)
    producer = client.create_producer(SOURCE)
    for item in ("coffee", "tea", "cake"):
        producer.send(item.encode(), partition_key=item)
    client.close()


def run_pipeline() -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = (
        SparkSession.builder.master(SPARK_MASTER)
        .appName("magnetar-example")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark_connector.register(spark)
    orders = (
        spark.readStream.format("magnetar")
        .option("service_url", SERVICE_URL)
        .option("topic", SOURCE)
        .load()
    )
    shouted = orders.select(upper(col("value").cast("string")).alias("value"), col("key"))
    query = (
        shouted.writeStream.format("magnetar")
        .option("service_url", SERVICE_URL)
        .option("topic", SINK)
        .option("checkpointLocation", CHECKPOINT)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    spark.stop()


def show() -> None:
    client = pulsar.Client(SERVICE_URL)
    reader = client.create_reader(SINK, pulsar.MessageId.earliest)
    while reader.has_message_available():
        msg = reader.read_next(5000)
        print(f"{msg.partition_key():>8}: {msg.data().decode()}")
    client.close()


if __name__ == "__main__":
    enable_deduplication()
    seed()
    run_pipeline()
    show()
