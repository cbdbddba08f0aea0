"""A raw protocol client for tests: the wire protocol spoken with our codec
over a blocking socket, for hostile-input and exact-order tests."""

from __future__ import annotations

import itertools
import socket
import time
from typing import Any

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
from tests.support.brokers import BrokerThread

T = pb.BaseCommand


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

    def send_connect(self, protocol_version: int = 20, token: str | None = None) -> None:
        """CONNECT, with `token` as token authentication when given."""
        connect = pb.CommandConnect(client_version="raw-test", protocol_version=protocol_version)
        if token is not None:
            connect.auth_method_name, connect.auth_data = "token", token.encode()
        self.send(connect)

    def connect(self, protocol_version: int = 20, token: str | None = None) -> pb.CommandConnected:
        self.send_connect(protocol_version, token)
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
