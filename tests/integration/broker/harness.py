"""Test harness: a real broker on a background thread, and a raw protocol client.

`BrokerThread` runs a BrokerServer on its own event loop in a daemon thread,
bound to port 0 (or a given port, for restarts on the same address). The
official client blocks its caller, so the broker must not share the test's
thread. `RawClient` speaks the wire protocol with our codec over a blocking
socket, for hostile-input and exact-order tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Coroutine
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

from magnetar.broker.config import BrokerConfig
from magnetar.broker.server import BrokerServer
from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.errors import ProtocolError
from magnetar.proto.frames import (
    Frame,
    FrameDecoder,
    Payload,
    command_name,
    encode_command,
    encode_payload_command,
)

T = pb.BaseCommand
R = TypeVar("R")
TIMEOUT = 10.0


class BrokerThread:
    """A broker serving from a background thread; `stop()` shuts it down cleanly."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.server: BrokerServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.leaked_tasks: list[str] = []

    @property
    def url(self) -> str:
        assert self.server is not None
        return self.server.service_url

    @property
    def http_url(self) -> str:
        assert self.server is not None
        return self.server.http_url

    @property
    def port(self) -> int:
        assert self.server is not None
        return self.server.port

    def start(self) -> BrokerThread:
        self._ready.clear()
        self._thread = threading.Thread(target=self._run, name="magnetar-broker", daemon=True)
        self._thread.start()
        if not self._ready.wait(TIMEOUT):
            raise TimeoutError("broker did not start")
        if self._error is not None:
            raise self._error
        return self

    def _run(self) -> None:
        loop = _new_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._start())
            self._ready.set()
            loop.run_forever()
        finally:
            self._ready.set()
            # Every task must have had an owner that awaited it during shutdown.
            leftovers = asyncio.all_tasks(loop)
            self.leaked_tasks = [repr(task) for task in leftovers]
            for task in leftovers:
                task.cancel()
            if leftovers:
                loop.run_until_complete(asyncio.gather(*leftovers, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _start(self) -> None:
        self.server = BrokerServer(self.config)
        try:
            await self.server.start()
        except BaseException as exc:
            self._error = exc

    def call(self, coro: Coroutine[Any, Any, R]) -> R:
        """Run a coroutine on the broker's loop and wait for its result."""
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(TIMEOUT)

    def stop(self) -> None:
        if self._loop is None or self._thread is None:
            return
        if self.server is not None and self._error is None:
            self.call(self.server.shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(TIMEOUT)
        assert not self._thread.is_alive(), "broker thread did not stop"
        self._loop = None
        self._thread = None
        assert not self.leaked_tasks, f"tasks left running after shutdown: {self.leaked_tasks}"

    def restart(self, **changes: Any) -> BrokerThread:
        """Stop, then start a new broker on the same data directory and port."""
        port = self.port
        self.stop()
        self.config = self.config.replace(port=port, **changes)
        self.server = None
        return self.start()

    def __enter__(self) -> BrokerThread:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


BrokerFactory = Callable[..., "BrokerThread"]


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


def broker_config(data_dir: Path, **changes: Any) -> BrokerConfig:
    """A test configuration: ephemeral ports, its own data directory."""
    settings: dict[str, Any] = {"data_dir": data_dir, "port": 0, "http_port": 0}
    settings.update(changes)
    return BrokerConfig(**settings)


class RawClient:
    """A blocking, frame-level client built on our codec."""

    def __init__(self, host: str, port: int, timeout: float = 5.0) -> None:
        self._setup(socket.create_connection((host, port), timeout=timeout))

    @classmethod
    def from_socket(cls, sock: socket.socket) -> RawClient:
        client = cls.__new__(cls)
        client._setup(sock)
        return client

    def _setup(self, sock: socket.socket) -> None:
        self.sock = sock
        self.decoder = FrameDecoder()
        self._request_ids = itertools.count(1)
        self.received: list[Frame] = []

    @classmethod
    def for_broker(cls, broker: BrokerThread) -> RawClient:
        return cls(broker.config.advertised_host, broker.port)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request_id(self) -> int:
        return next(self._request_ids)

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, *bodies: Any) -> None:
        """Send Command* bodies (each wrapped in a BaseCommand) in one write."""
        from magnetar.proto.frames import wrap

        self.sock.sendall(b"".join(encode_command(wrap(body)) for body in bodies))

    def send_payload(self, body: Any, payload: Payload) -> None:
        from magnetar.proto.frames import wrap

        self.sock.sendall(encode_payload_command(wrap(body), payload))

    def next_frame(self, timeout: float = 5.0) -> Frame:
        """The next frame; raises EOFError when the broker closed the connection."""
        deadline = time.monotonic() + timeout
        while True:
            frame = self.decoder.next_frame()
            if frame is not None:
                self.received.append(frame)
                return frame
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no frame from the broker")
            self.sock.settimeout(remaining)
            data = self.sock.recv(65536)
            if not data:
                raise EOFError("connection closed by the broker")
            self.decoder.feed(data)

    def expect(self, command_type: int, timeout: float = 5.0) -> Frame:
        """Skip PINGs (answering them) until a frame of `command_type` arrives."""
        while True:
            frame = self.next_frame(timeout)
            if frame.type == T.PING and command_type != T.PING:
                self.send(pb.CommandPong())
                continue
            if frame.type != command_type:
                raise AssertionError(f"expected {command_name(command_type)}, got {frame}")
            return frame

    def expect_each(self, *command_types: int, timeout: float = 5.0) -> dict[int, Frame]:
        """One frame of each type, in whatever order they arrive."""
        wanted = set(command_types)
        got: dict[int, Frame] = {}
        while wanted:
            frame = self.next_frame(timeout)
            if frame.type == T.PING:
                self.send(pb.CommandPong())
                continue
            if frame.type not in wanted:
                raise AssertionError(f"unexpected {frame}")
            wanted.discard(frame.type)
            got[frame.type] = frame
        return got

    def send_message(self, producer_id: int, sequence_id: int, data: bytes, **meta: Any) -> None:
        """A SEND without waiting for its receipt."""
        metadata = pb.MessageMetadata(
            producer_name="raw",
            sequence_id=sequence_id,
            publish_time=int(time.time() * 1000),
            **meta,
        )
        self.send_payload(
            pb.CommandSend(
                producer_id=producer_id,
                sequence_id=sequence_id,
                num_messages=meta.get("num_messages_in_batch", 1),
            ),
            Payload.build(metadata, data),
        )

    def wait_closed(self, timeout: float = 5.0) -> list[Frame]:
        """Read until the broker closes; return the frames seen on the way."""
        seen: list[Frame] = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                seen.append(self.next_frame(max(deadline - time.monotonic(), 0.01)))
            except EOFError:
                return seen
            except ConnectionResetError:
                return seen
            except ProtocolError:
                continue

    def connect(self, protocol_version: int = 20) -> pb.CommandConnected:
        self.send(pb.CommandConnect(client_version="raw-test", protocol_version=protocol_version))
        return self.expect(T.CONNECTED).command.connected

    def create_producer(self, topic: str, producer_id: int = 1) -> pb.CommandProducerSuccess:
        self.send(
            pb.CommandProducer(topic=topic, producer_id=producer_id, request_id=self.request_id())
        )
        return self.expect(T.PRODUCER_SUCCESS).command.producer_success

    def publish(self, producer_id: int, sequence_id: int, data: bytes) -> pb.CommandSendReceipt:
        metadata = pb.MessageMetadata(
            producer_name="raw", sequence_id=sequence_id, publish_time=int(time.time() * 1000)
        )
        self.send_payload(
            pb.CommandSend(producer_id=producer_id, sequence_id=sequence_id),
            Payload.build(metadata, data),
        )
        return self.expect(T.SEND_RECEIPT).command.send_receipt

    def subscribe(
        self,
        topic: str,
        subscription: str,
        consumer_id: int,
        sub_type: int = pb.CommandSubscribe.Shared,
        *,
        priority_level: int = 0,
        name: str = "",
        earliest: bool = True,
    ) -> None:
        self.send(
            pb.CommandSubscribe(
                topic=topic,
                subscription=subscription,
                subType=sub_type,  # type: ignore[arg-type]
                consumer_id=consumer_id,
                request_id=self.request_id(),
                consumer_name=name or f"consumer-{consumer_id}",
                priority_level=priority_level,
                initialPosition=pb.CommandSubscribe.Earliest
                if earliest
                else pb.CommandSubscribe.Latest,
            )
        )
        self.expect(T.SUCCESS)


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """`count` distinct free loopback ports. They are held open together
    while chosen: one port asked for twice in a row can come back twice."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(contextlib.closing(socket.socket()))
            sock.bind(("127.0.0.1", 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


def http_call(
    method: str, url: str, body: object = None, *, token: str | None = None
) -> tuple[int, Any]:
    """One HTTP request (with a bearer `token` if given); (status, decoded JSON
    body or None). Errors are answers."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    return status, json.loads(raw) if raw else None


class BrokerProcess:
    """The daemon in a subprocess on fixed ports, so it can be SIGKILLed and
    started again on the same address and data directory."""

    def __init__(self, data_dir: Path, log_path: Path, **settings: object) -> None:
        self.data_dir = data_dir
        self.log_path = log_path
        # Distinct: with one port given twice the broker's HTTP bind fails,
        # and the start-up probe of that port reaches its binary listener.
        self.port, self.http_port = free_ports(2)
        self.env = {
            **os.environ,
            **{f"MAGNETAR_{key.upper()}": str(value) for key, value in settings.items()},
        }
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    # The broker command's mode, and what else it is started with.
    mode = "standalone"

    def _extra_args(self) -> list[str]:
        return []

    def _started(self) -> bool:
        """Whether the started process serves (its HTTP port answers)."""
        try:
            with socket.create_connection(("127.0.0.1", self.http_port), timeout=0.5):
                return True
        except OSError:
            return False

    def start(self, preexec: Callable[[], None] | None = None) -> Self:
        """Start (again); `preexec` runs in the child before exec (limits)."""
        command = [sys.executable, "-m", "magnetar.broker", self.mode, *self._extra_args()]
        command += ["--port", str(self.port), "--http-port", str(self.http_port)]
        command += ["--data-dir", str(self.data_dir)]
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                command, stdout=log, stderr=log, env=self.env, preexec_fn=preexec
            )
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"broker exited with {self.proc.returncode}; see {self.log_path}"
                )
            if self._started():
                return self
            time.sleep(0.02)
        raise TimeoutError(f"broker process did not start; see {self.log_path}")

    def kill(self) -> None:
        """SIGKILL: no shutdown phase, whatever was not durable is gone."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # a test may have SIGSTOPped it
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()
