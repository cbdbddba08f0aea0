"""A Spark standalone cluster on loopback, from the PySpark wheel's own
`bin/spark-class`: a master and workers as separate JVMs (issue 46), so a
driver's tasks run in executor processes of their own, as on a user's
cluster. Used by the cluster tests and by `python -m tests.support.spark_cluster`
(`make spark-cluster`), which keeps one running until Ctrl-C.

Each process gets its own session, so stopping kills a worker together with
the executor JVMs it started.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Self

from tests.support.ports import free_port

MASTER = "org.apache.spark.deploy.master.Master"
WORKER = "org.apache.spark.deploy.worker.Worker"


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def spark_env() -> dict[str, str]:
    """The environment of the cluster's JVMs and of drivers that use it:
    loopback only, and this interpreter for the Python workers."""
    return {
        **os.environ,
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }


TICKS = os.sysconf("SC_CLK_TCK")


def processes() -> dict[int, tuple[int, float]]:
    """This machine's processes: pid -> (parent pid, CPU seconds of it and
    of the children it reaped), from /proc."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        # pid (comm) state ppid ...: comm may hold spaces, so after ")".
        fields = stat.rsplit(")", 1)[1].split()
        ticks = sum(int(value) for value in fields[11:15])  # utime stime cutime cstime
        table[int(entry.name)] = (int(fields[1]), ticks / TICKS)
    return table


class SparkCluster:
    """A master and `workers` workers of `cores` cores each; `start()` returns
    once every worker has registered with the master."""

    def __init__(self, workdir: Path, *, workers: int = 2, cores: int = 1) -> None:
        self.workdir = workdir
        self.workers = workers
        self.cores = cores
        self.port = free_port()
        self.webui_port = free_port()
        self._processes: list[subprocess.Popen[bytes]] = []

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    @property
    def status_url(self) -> str:
        return f"http://127.0.0.1:{self.webui_port}/json/"

    def _spawn(self, name: str, *args: str) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        command = [str(spark_home() / "bin" / "spark-class"), *args]
        # The child keeps its own copy of the log's descriptor.
        with (self.workdir / f"{name}.log").open("wb") as log:
            self._processes.append(
                subprocess.Popen(
                    command,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=spark_env(),
                    cwd=self.workdir,
                    start_new_session=True,
                )
            )

    def status(self) -> dict[str, Any]:
        """The master's JSON status (workers, applications)."""
        with urllib.request.urlopen(self.status_url, timeout=5) as answer:
            status: dict[str, Any] = json.load(answer)
            return status

    def start(self, timeout: float = 90.0) -> Self:
        self._spawn(
            "master",
            MASTER,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--webui-port",
            str(self.webui_port),
        )
        for index in range(self.workers):
            work_dir = self.workdir / f"worker-{index}"
            self._spawn(
                f"worker-{index}",
                WORKER,
                "--host",
                "127.0.0.1",
                "--cores",
                str(self.cores),
                "--memory",
                "1g",
                "--webui-port",
                str(free_port()),
                "--work-dir",
                str(work_dir),
                self.master_url,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            exited = [p.args for p in self._processes if p.poll() is not None]
            if exited:
                self.stop()
                raise RuntimeError(
                    f"a Spark process exited at start: {exited}; logs in {self.workdir}"
                )
            try:
                if self.status().get("aliveworkers") == self.workers:
                    return self
            except (urllib.error.URLError, OSError, ValueError):
                pass
            time.sleep(0.5)
        self.stop()
        raise TimeoutError(
            f"the Spark cluster did not start in {timeout} s; logs in {self.workdir}"
        )

    def executor_pids(self) -> list[int]:
        """The executor JVMs the workers started (their children)."""
        workers = {p.pid for p in self._processes[1:]}
        return sorted(pid for pid, (parent, _) in processes().items() if parent in workers)

    def stop(self) -> None:
        for process in reversed(self._processes):
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGTERM)
                except ProcessLookupError:
                    continue
        for process in self._processes:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        self._processes.clear()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A Spark standalone cluster on loopback")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cores", type=int, default=1, help="cores per worker")
    parser.add_argument("--dir", type=Path, default=Path("build/spark-cluster"))
    args = parser.parse_args(argv)
    # Ctrl-C, or a plain kill: stop the JVMs either way (a shell that starts
    # this in the background has SIGINT ignored, so set it again).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    with SparkCluster(args.dir.resolve(), workers=args.workers, cores=args.cores) as cluster:
        print(
            f"Spark master {cluster.master_url} (status {cluster.status_url}); logs in {args.dir}"
        )
        print("Ctrl-C stops it.", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
