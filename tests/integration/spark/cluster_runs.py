"""Running the driver programs of cluster_jobs.py against a SparkCluster
(issue 46) from a test: to the end, or in the background so a test can kill
an executor or the driver itself; and reading back what a file sink
committed."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from tests.support.brokers import BrokerThread
from tests.support.http_calls import http_call
from tests.support.spark_cluster import SparkCluster, spark_env

REPO = Path(__file__).resolve().parents[3]


def _command(cluster: SparkCluster, job: str, args: dict[str, Any]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "tests.integration.spark.cluster_jobs",
        cluster.master_url,
        job,
        json.dumps(args),
    ]


def submit(cluster: SparkCluster, job: str, **args: Any) -> dict[str, Any]:
    """Run a driver program to its end; the JSON line it printed last."""
    done = subprocess.run(
        _command(cluster, job, args),
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


class Driver:
    """A driver program running in the background, in a session of its own so
    that killing it kills its JVM too (as losing the driver's machine does)."""

    def __init__(self, cluster: SparkCluster, job: str, **args: Any) -> None:
        self.process = subprocess.Popen(
            _command(cluster, job, args),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=spark_env(),
            cwd=REPO,
            start_new_session=True,
        )

    def running(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL the driver and its JVM."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.communicate()

    def result(self, timeout: float = 300) -> dict[str, Any]:
        """Wait for the end; the JSON line it printed last."""
        try:
            out, err = self.process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        assert self.process.returncode == 0, err[-3000:]
        result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        return result

    def __enter__(self) -> Driver:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.running():
            self.kill()


def committed_batches(output: Path) -> int:
    """How many micro-batches a file sink at `output` has committed."""
    log = output / "_spark_metadata"
    if not log.is_dir():
        return 0
    return sum(1 for f in log.iterdir() if f.name.split(".")[0].isdigit())


def sink_rows(output: Path) -> list[dict[str, Any]]:
    """The rows of the files a JSON file sink committed, as its metadata log
    lists them: a killed task's partial files are not in it, as Spark's own
    reader of the directory would skip them."""
    paths: set[str] = set()
    for entry in sorted((output / "_spark_metadata").iterdir()):
        if not entry.name.split(".")[0].isdigit():
            continue
        lines = entry.read_text().splitlines()
        for line in lines[1:]:  # after the log's version line
            record = json.loads(line)
            if record.get("action", "add") == "add":
                paths.add(record["path"])
    rows = []
    for path in sorted(paths):
        local = Path(unquote(urlparse(path).path))
        rows += [json.loads(line) for line in local.read_text().splitlines() if line]
    return rows


def written(broker: BrokerThread, topic: str) -> int:
    """Messages the topic has taken in so far (0 before it exists)."""
    status, stats = http_call(
        "GET", f"{broker.http_url}/admin/v2/{topic.replace('://', '/')}/stats"
    )
    return int(stats.get("msgInCounter", 0)) if status == 200 else 0
