"""A scripted Pulsar broker for driving the official client in tests.

It speaks the wire protocol with our own codec, answers just enough for the
official client to connect, look up, create producers and publish, and records
every frame it receives. It runs on plain threads (one listener, one per
connection) because the official client blocks its caller and runs its own
threads; nothing here needs an event loop.

    with FakeBroker(partitions={"persistent://public/default/t": 4}) as broker:
        client = pulsar.Client(broker.url)
        ...
        send = broker.wait_for_send(lambda s: s.topic.endswith("-partition-1"))

Override a command by passing `handlers={BaseCommand.PRODUCER: fn}`; `fn(conn,
frame)` returns the frames to write (bytes or BaseCommands).
"""

from __future__ import annotations

import contextlib
import itertools
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import TracebackType

from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.errors import ProtocolError
from magnetar.proto.frames import Frame, FrameDecoder, encode_command, wrap

T = pb.BaseCommand
DEFAULT_TIMEOUT = 10.0
SERVER_VERSION = "magnetar-fake-broker"

Reply = bytes | pb.BaseCommand
Handler = Callable[["FakeConnection", Frame], Iterable[Reply]]


@dataclass(frozen=True)
class ProducerInfo:
    producer_id: int
    topic: str
    name: str
    command: pb.CommandProducer


@dataclass(frozen=True)
class RecordedSend:
    """One SEND frame and the producer (and so the topic) it was sent on."""

    producer: ProducerInfo
    frame: Frame

    @property
    def topic(self) -> str:
        return self.producer.topic

    @property
    def metadata(self) -> pb.MessageMetadata:
        assert self.frame.payload is not None
        return self.frame.payload.metadata

    @property
    def payload(self) -> bytes:
        assert self.frame.payload is not None
        return self.frame.payload.payload


@dataclass
class FakeConnection:
    """One client connection's state, as handlers see it."""

    broker: FakeBroker
    sock: socket.socket
    producers: dict[int, ProducerInfo] = field(default_factory=dict)
    connect: pb.CommandConnect | None = None

    def send(self, *replies: Reply) -> None:
        data = b"".join(r if isinstance(r, bytes) else encode_command(r) for r in replies)
        with self.broker._lock:
            self.sock.sendall(data)


class FakeBroker:
    """A threaded fake broker on 127.0.0.1, port 0; use as a context manager."""

    def __init__(
        self,
        *,
        partitions: Mapping[str, int] | None = None,
        handlers: Mapping[int, Handler] | None = None,
        protocol_version: int = 19,
        max_message_size: int | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self.partitions = dict(partitions or {})
        self.protocol_version = protocol_version
        self.max_message_size = max_message_size
        self.timeout = timeout
        self.frames: list[Frame] = []
        self.sends: list[RecordedSend] = []
        self.errors: list[BaseException] = []
        self.started = threading.Event()
        self._lock = threading.Lock()
        self._changed = threading.Condition()
        self._entry_ids = itertools.count()
        self._producer_names = itertools.count()
        self._closed = False
        self._threads: list[threading.Thread] = []
        self._connections: list[FakeConnection] = []
        self._handlers: dict[int, Handler] = {
            T.CONNECT: self._on_connect,
            T.PARTITIONED_METADATA: self._on_partitioned_metadata,
            T.LOOKUP: self._on_lookup,
            T.PRODUCER: self._on_producer,
            T.SEND: self._on_send,
            T.PING: lambda conn, frame: [wrap(pb.CommandPong())],
            T.CLOSE_PRODUCER: self._on_close_producer,
            T.CLOSE_CONSUMER: lambda conn, frame: [
                wrap(pb.CommandSuccess(request_id=frame.command.close_consumer.request_id))
            ],
        }
        self._handlers.update(handlers or {})
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port: int = self._listener.getsockname()[1]

    @property
    def url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    # ------------------------------------------------------------ lifecycle

    def start(self) -> FakeBroker:
        thread = threading.Thread(target=self._accept_loop, name="fake-broker-accept", daemon=True)
        self._threads.append(thread)
        thread.start()
        self.started.wait(self.timeout)
        return self

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.close()
        for conn in list(self._connections):
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                conn.sock.close()
        for thread in self._threads:
            thread.join(self.timeout)
        with self._changed:
            self._changed.notify_all()

    def __enter__(self) -> FakeBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ------------------------------------------------------------ waiting

    def wait_for(self, predicate: Callable[[], bool], timeout: float | None = None) -> None:
        """Block until `predicate()` holds; AssertionError on timeout or broker error."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        with self._changed:
            while not predicate():
                if self.errors:
                    raise AssertionError(f"fake broker failed: {self.errors[0]!r}")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError("timed out waiting on the fake broker")
                self._changed.wait(remaining)

    def frames_of(self, command_type: int) -> list[Frame]:
        with self._changed:
            return [f for f in self.frames if f.type == command_type]

    def wait_for_frame(self, command_type: int, timeout: float | None = None) -> Frame:
        """The first received frame of a type, waiting for it if need be."""
        self.wait_for(lambda: any(f.type == command_type for f in self.frames), timeout)
        return self.frames_of(command_type)[0]

    def wait_for_sends(self, count: int, timeout: float | None = None) -> list[RecordedSend]:
        self.wait_for(lambda: len(self.sends) >= count, timeout)
        with self._changed:
            return list(self.sends)

    # ------------------------------------------------------------ default handlers

    def _on_connect(self, conn: FakeConnection, frame: Frame) -> list[Reply]:
        conn.connect = frame.command.connect
        connected = pb.CommandConnected(
            server_version=SERVER_VERSION,
            protocol_version=min(self.protocol_version, frame.command.connect.protocol_version),
        )
        if self.max_message_size is not None:
            connected.max_message_size = self.max_message_size
        return [wrap(connected)]

    def _on_partitioned_metadata(self, conn: FakeConnection, frame: Frame) -> list[Reply]:
        request = frame.command.partitionMetadata
        return [
            wrap(
                pb.CommandPartitionedTopicMetadataResponse(
                    request_id=request.request_id,
                    partitions=self.partitions.get(request.topic, 0),
                    response=pb.CommandPartitionedTopicMetadataResponse.Success,
                )
            )
        ]

    def _on_lookup(self, conn: FakeConnection, frame: Frame) -> list[Reply]:
        return [
            wrap(
                pb.CommandLookupTopicResponse(
                    request_id=frame.command.lookupTopic.request_id,
                    response=pb.CommandLookupTopicResponse.Connect,
                    brokerServiceUrl=self.url,
                    brokerServiceUrlTls=f"pulsar+ssl://127.0.0.1:{self.port}",
                    authoritative=True,
                )
            )
        ]

    def _on_producer(self, conn: FakeConnection, frame: Frame) -> list[Reply]:
        request = frame.command.producer
        name = (
            request.producer_name
            if request.HasField("producer_name")
            else f"fake-producer-{next(self._producer_names)}"
        )
        conn.producers[request.producer_id] = ProducerInfo(
            request.producer_id, request.topic, name, request
        )
        return [
            wrap(
                pb.CommandProducerSuccess(
                    request_id=request.request_id, producer_name=name, last_sequence_id=-1
                )
            )
        ]

    def _on_send(self, conn: FakeConnection, frame: Frame) -> list[Reply]:
        send = frame.command.send
        producer = conn.producers.get(send.producer_id)
        if producer is None:
            raise ProtocolError(f"SEND for unknown producer {send.producer_id}")
        with self._changed:
            self.sends.append(RecordedSend(producer, frame))
        receipt = pb.CommandSendReceipt(
            producer_id=send.producer_id,
            sequence_id=send.sequence_id,
            message_id=pb.MessageIdData(ledgerId=1, entryId=next(self._entry_ids)),
        )
        if send.HasField("highest_sequence_id"):
            receipt.highest_sequence_id = send.highest_sequence_id
        return [wrap(receipt)]

    def _on_close_producer(self, conn: FakeConnection, frame: Frame) -> list[Reply]:
        request = frame.command.close_producer
        conn.producers.pop(request.producer_id, None)
        return [wrap(pb.CommandSuccess(request_id=request.request_id))]

    # ------------------------------------------------------------ I/O threads

    def _accept_loop(self) -> None:
        self.started.set()
        while not self._closed:
            try:
                sock, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            sock.settimeout(None)
            conn = FakeConnection(self, sock)
            self._connections.append(conn)
            thread = threading.Thread(
                target=self._serve, args=(conn,), name="fake-broker-conn", daemon=True
            )
            self._threads.append(thread)
            thread.start()

    def _serve(self, conn: FakeConnection) -> None:
        decoder = FrameDecoder()
        try:
            while not self._closed:
                data = conn.sock.recv(65536)
                if not data:
                    return
                decoder.feed(data)
                for frame in decoder:
                    with self._changed:
                        self.frames.append(frame)
                        self._changed.notify_all()
                    handler = self._handlers.get(frame.type)
                    if handler is not None:
                        conn.send(*handler(conn, frame))
                    with self._changed:
                        self._changed.notify_all()
        except OSError:
            # The client hung up or close() shut the socket: not a failure.
            return
        except Exception as exc:  # record for the test thread, which asserts on it
            with self._changed:
                self.errors.append(exc)
                self._changed.notify_all()
        finally:
            with contextlib.suppress(OSError):
                conn.sock.close()
