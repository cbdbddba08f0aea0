"""The connector on a Spark standalone cluster (issue 46): a master and two
one-core workers as separate JVMs on loopback, and the driver in a process
of its own, so every task runs in an executor process, not in the driver
(tests/support/spark_cluster.py, tests/integration/spark/cluster_jobs.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.brokers import BrokerThread
from tests.support.draining import stored_messages
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
