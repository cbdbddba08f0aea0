"""Losing processes on a Spark standalone cluster (issue 46.3): an executor
JVM SIGKILLed in the middle of a streaming write with deduplication on, and
of a streaming read into a file sink; a driver SIGKILLed (with its JVM) and
started again from its checkpoint. Spark runs the lost tasks again, or the
restarted query its unfinished batch, and the output holds every input row
exactly once."""

from __future__ import annotations

import json
import os
import signal
import uuid
from pathlib import Path

import pytest

from tests.integration.spark.cluster_runs import Driver, committed_batches, sink_rows, written
from tests.support.brokers import BrokerThread
from tests.support.draining import stored_messages
from tests.support.polling import eventually
from tests.support.spark_cluster import SparkCluster
from tests.support.spark_topics import create_partitioned, produce

pytestmark = pytest.mark.timeout(600)


def _topic(prefix: str) -> str:
    return f"persistent://public/default/{prefix}-{uuid.uuid4().hex[:8]}"


def _json_input(directory: Path, files: int, rows: int) -> list[str]:
    """`files` JSON files of `rows` rows each; all the values."""
    directory.mkdir()
    expected = []
    for f in range(files):
        values = [f"f{f}-r{i}" for i in range(rows)]
        expected += values
        lines = "\n".join(json.dumps({"value": v}) for v in values)
        (directory / f"part-{f:02}.json").write_text(lines)
    return expected


def _stream_write(
    cluster: SparkCluster, broker: BrokerThread, topic: str, tmp_path: Path
) -> Driver:
    return Driver(
        cluster,
        "stream_write",
        service_url=broker.url,
        topic=topic,
        source=str(tmp_path / "in"),
        checkpoint=str(tmp_path / "checkpoint"),
        files_per_trigger=2,
    )


def _stored_once(broker: BrokerThread, topic: str, expected: list[str]) -> None:
    stored = [m.data().decode() for m in stored_messages(broker.url, topic)]
    assert len(stored) == len(expected)
    assert sorted(stored) == sorted(expected)


def _kill_an_executor(cluster: SparkCluster, driver: Driver) -> None:
    assert driver.running(), "the query ended before an executor could be killed"
    os.kill(cluster.executor_pids()[0], signal.SIGKILL)


def test_streaming_write_survives_a_killed_executor(
    cluster: SparkCluster, broker: BrokerThread, tmp_path: Path
) -> None:
    """Issue 46.3 (a): a streaming write with deduplication on, one executor
    JVM SIGKILLed while it writes; Spark runs the lost tasks again (on the
    other worker, or on the executor the master starts in its place) and
    the topic holds every input row exactly once."""
    topic = _topic("cluster-kill")
    expected = _json_input(tmp_path / "in", files=16, rows=400)
    with _stream_write(cluster, broker, topic, tmp_path) as driver:
        eventually(
            "800 rows written while an executor runs (or the query's end)",
            lambda: (
                not driver.running()
                or (written(broker, topic) >= 800 and bool(cluster.executor_pids()))
            ),
            timeout=180,
        )
        _kill_an_executor(cluster, driver)
        assert driver.result() == {"failure": None}
    _stored_once(broker, topic, expected)


def _fill(broker: BrokerThread, topic: str, partitions: int, count: int) -> list[str]:
    create_partitioned(broker, topic, partitions)
    values = [f"m{i}" for i in range(count)]
    produce(broker, topic, values)
    return values


def _stream_read(cluster: SparkCluster, broker: BrokerThread, topic: str, tmp_path: Path) -> Driver:
    return Driver(
        cluster,
        "stream_read",
        service_url=broker.url,
        output=str(tmp_path / "out"),
        checkpoint=str(tmp_path / "checkpoint"),
        options={"topic": topic, "max_messages_per_trigger": "400"},
    )


def _sink_once(output: Path, expected: list[str]) -> None:
    values = [r["value"] for r in sink_rows(output)]
    assert len(values) == len(expected)
    assert sorted(values) == sorted(expected)


def test_streaming_read_into_a_file_sink_survives_a_killed_executor(
    cluster: SparkCluster, broker: BrokerThread, tmp_path: Path
) -> None:
    """Issue 46.3 (b): a stream reads 4,000 messages of a 4-partition topic
    in batches of 400 into a JSON file sink; once a batch is committed one
    executor JVM is SIGKILLed. The files the sink committed hold every
    message exactly once (a killed task's partial file is not committed)."""
    topic = _topic("cluster-read-kill")
    expected = _fill(broker, topic, 4, 4000)
    output = tmp_path / "out"
    with _stream_read(cluster, broker, topic, tmp_path) as driver:
        eventually(
            "a committed batch while an executor runs (or the query's end)",
            lambda: (
                not driver.running()
                or (committed_batches(output) >= 1 and bool(cluster.executor_pids()))
            ),
            timeout=180,
        )
        _kill_an_executor(cluster, driver)
        assert driver.result() == {"failure": None}
    _sink_once(output, expected)


def test_streaming_write_after_its_driver_was_killed(
    cluster: SparkCluster, broker: BrokerThread, tmp_path: Path
) -> None:
    """Issue 46.3, driver restart: the driver of a streaming write (dedup on)
    is SIGKILLed with its JVM once part of the input is written; the same
    query started again from its checkpoint writes the batch it had not
    committed again, with the same sequence ids, and the rest: every row is
    stored exactly once."""
    topic = _topic("cluster-driver-write")
    expected = _json_input(tmp_path / "in", files=16, rows=400)
    with _stream_write(cluster, broker, topic, tmp_path) as driver:
        eventually(
            "1,200 rows written (or the query's end)",
            lambda: not driver.running() or written(broker, topic) >= 1200,
            timeout=180,
        )
        assert driver.running(), "the query ended before its driver could be killed"
        driver.kill()
    assert written(broker, topic) < len(expected)
    with _stream_write(cluster, broker, topic, tmp_path) as again:
        assert again.result() == {"failure": None}
    _stored_once(broker, topic, expected)


def test_streaming_read_after_its_driver_was_killed(
    cluster: SparkCluster, broker: BrokerThread, tmp_path: Path
) -> None:
    """Issue 46.3, driver restart: the driver of a stream reading into a file
    sink is SIGKILLed with its JVM after two committed batches; started
    again from its checkpoint, it finishes: the sink's committed files hold
    every message exactly once."""
    topic = _topic("cluster-driver-read")
    expected = _fill(broker, topic, 4, 4000)
    output = tmp_path / "out"
    with _stream_read(cluster, broker, topic, tmp_path) as driver:
        eventually(
            "two committed batches (or the query's end)",
            lambda: not driver.running() or committed_batches(output) >= 2,
            timeout=180,
        )
        assert driver.running(), "the query ended before its driver could be killed"
        driver.kill()
    assert committed_batches(output) < 10
    with _stream_read(cluster, broker, topic, tmp_path) as again:
        assert again.result() == {"failure": None}
    _sink_once(output, expected)
