"""The connector on a Spark standalone cluster (issue 46): a master and two
one-core workers as separate JVMs on loopback, and the driver in a process
of its own, so every task runs in an executor process, not in the driver
(tests/support/spark_cluster.py, tests/integration/spark/cluster_jobs.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.brokers import BrokerThread
from tests.support.draining import stored_messages
from tests.support.http_calls import http_call
from tests.support.polling import eventually
from tests.support.spark_cluster import SparkCluster, spark_env

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    with SparkCluster(tmp_path_factory.mktemp("spark-cluster"), workers=2, cores=1) as started:
        yield started


def _submit(cluster: SparkCluster, job: str, **args: Any) -> dict[str, Any]:
    """Run a driver program against the cluster; what it printed."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.integration.spark.cluster_jobs",
            cluster.master_url,
            job,
            json.dumps(args),
        ],
        capture_output=True,
        text=True,
        env=spark_env(),
        cwd=REPO,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_batch_write_and_read_run_in_executor_processes(
    cluster: SparkCluster, broker: BrokerThread
) -> None:
    """Batch write of 2,000 rows in 4 tasks and a batch read, submitted to
    the cluster: the topic holds every row once, the read returns them all,
    and the tasks ran in executor processes, none of them the driver."""
    topic = f"persistent://public/default/cluster-{uuid.uuid4().hex[:8]}"
    seen = _submit(
        cluster, "write_then_read", service_url=broker.url, topic=topic, count=2000, partitions=4
    )
    expected = sorted(f"v{i}" for i in range(2000))
    assert seen["values"] == expected
    assert sorted(m.data().decode() for m in stored_messages(broker.url, topic)) == expected
    assert seen["task_pids"] and seen["driver_pid"] not in seen["task_pids"]
    finished = cluster.status()["completedapps"]
    assert any(app["name"] == "magnetar-cluster-test" for app in finished)


def test_streaming_write_survives_a_killed_executor(
    cluster: SparkCluster, broker: BrokerThread, tmp_path: Path
) -> None:
    """Issue 46.3 (a): a streaming write with deduplication on, one executor
    JVM SIGKILLed while it writes; Spark runs the lost tasks again (on the
    other worker, or on the executor the master starts in its place) and
    the topic holds every input row exactly once."""
    topic = f"persistent://public/default/cluster-kill-{uuid.uuid4().hex[:8]}"
    source = tmp_path / "in"
    source.mkdir()
    expected = []
    for f in range(16):
        rows = [f"f{f}-r{i}" for i in range(400)]
        expected += rows
        (source / f"part-{f:02}.json").write_text("\n".join(json.dumps({"value": v}) for v in rows))
    command = [
        sys.executable,
        "-m",
        "tests.integration.spark.cluster_jobs",
        cluster.master_url,
        "stream_write",
        json.dumps(
            {
                "service_url": broker.url,
                "topic": topic,
                "source": str(source),
                "checkpoint": str(tmp_path / "checkpoint"),
                "files_per_trigger": 2,
            }
        ),
    ]
    driver = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=spark_env(),
        cwd=REPO,
    )
    try:
        # Kill one executor once the query has written part of its input.
        eventually(
            "800 rows written while an executor runs (or the query's end)",
            lambda: (
                driver.poll() is not None
                or (_written(broker, topic) >= 800 and bool(cluster.executor_pids()))
            ),
            timeout=180,
        )
        assert driver.poll() is None, "the query ended before an executor could be killed"
        os.kill(cluster.executor_pids()[0], signal.SIGKILL)
        out, err = driver.communicate(timeout=300)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    assert driver.returncode == 0, err[-3000:]
    assert json.loads(out.strip().splitlines()[-1]) == {"failure": None}
    stored = [m.data().decode() for m in stored_messages(broker.url, topic)]
    assert len(stored) == len(expected)
    assert sorted(stored) == sorted(expected)


def _written(broker: BrokerThread, topic: str) -> int:
    """Messages the topic has taken in so far (0 before it exists)."""
    status, stats = http_call(
        "GET", f"{broker.http_url}/admin/v2/{topic.replace('://', '/')}/stats"
    )
    return int(stats.get("msgInCounter", 0)) if status == 200 else 0
