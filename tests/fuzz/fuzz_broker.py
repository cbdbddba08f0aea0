"""Coverage-guided fuzzing of the frame codec and the broker's command
handlers (issue 15), with atheris: `make fuzz [FUZZ_SECONDS=...]`.

Each input is fed twice: to a bare FrameDecoder (it may only yield frames or
raise ProtocolError) and as the bytes of one connection to a real broker
(real storage in a temporary directory, a transport that records writes).
A crash is any other exception from the codec, an exception escaping to the
event loop, or a broker log line at error level or with a traceback: the
broker must answer hostile bytes with a protocol error or a close, never with
an internal error. Not part of `make test` (it runs until stopped).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import atheris
import structlog

with atheris.instrument_imports():
    from magnetar.broker.config import BrokerConfig
    from magnetar.broker.connection.cnx import ServerCnx
    from magnetar.broker.server import BrokerServer
    from magnetar.proto import pulsar_api_pb2 as pb
    from magnetar.proto.errors import ProtocolError
    from magnetar.proto.frames import (
        FrameDecoder,
        Payload,
        encode_command,
        encode_payload_command,
        wrap,
    )


class BrokerBug(Exception):
    """The broker logged an error or raised where it should have refused."""


def _raise_on_errors(_logger: Any, method: str, event: MutableMapping[str, Any]) -> Any:
    if method in ("error", "critical", "exception") or event.get("exc_info"):
        raise BrokerBug(f"broker logged {method}: {event.get('event')}")
    raise structlog.DropEvent


class RecordingTransport(asyncio.Transport):
    """Stands in for the socket: keeps what the broker writes, notes a close."""

    def __init__(self) -> None:
        super().__init__()
        self.written = 0
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += len(data)

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


class Harness:
    def __init__(self) -> None:
        structlog.configure(processors=[_raise_on_errors])
        self.loop = asyncio.new_event_loop()
        self.failures: list[BaseException] = []
        self.loop.set_exception_handler(self._loop_error)
        self.data = tempfile.mkdtemp(prefix="magnetar-fuzz-")
        config = BrokerConfig(data_dir=Path(self.data), port=0, http_port=0, sync_policy="none")
        self.server = BrokerServer(config)
        self.loop.run_until_complete(self.server.start())

    def _loop_error(self, _loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        self.failures.append(context.get("exception") or RuntimeError(context["message"]))

    def one_input(self, data: bytes) -> None:
        decoder = FrameDecoder()
        decoder.feed(data)
        try:
            while decoder.next_frame() is not None:
                pass
        except ProtocolError:
            pass
        self.loop.run_until_complete(self._connection(data))
        if self.failures:
            failure, self.failures = self.failures[0], []
            raise failure

    async def _connection(self, data: bytes) -> None:
        assert self.server.service is not None
        cnx = ServerCnx(self.server.service, self.server.config, self.server.metrics)
        cnx.connection_made(RecordingTransport())
        # Split at a drawn point: framing across reads must not matter.
        cut = data[0] % (len(data) + 1) if data else 0
        cnx.data_received(data[:cut])
        cnx.data_received(data[cut:])
        for _ in range(5):  # let the handlers it spawned run
            await asyncio.sleep(0)
        cnx.connection_lost(None)
        await asyncio.sleep(0)


def seeds() -> list[bytes]:
    """Well-formed conversations to start from: random bytes rarely get past
    the size prefixes and the checksum on their own."""
    topic = "persistent://public/default/fuzz"
    connect = encode_command(wrap(pb.CommandConnect(client_version="fuzz", protocol_version=20)))
    metadata = pb.MessageMetadata(producer_name="f", sequence_id=0, publish_time=1)
    send = encode_payload_command(
        wrap(pb.CommandSend(producer_id=1, sequence_id=0)), Payload.build(metadata, b"x")
    )
    commands = [
        pb.CommandProducer(topic=topic, producer_id=1, request_id=1),
        pb.CommandSubscribe(
            topic=topic, subscription="s", subType=pb.CommandSubscribe.Shared,
            consumer_id=1, request_id=2,
        ),
        pb.CommandFlow(consumer_id=1, messagePermits=10),
        pb.CommandAck(
            consumer_id=1, ack_type=pb.CommandAck.Individual,
            message_id=[pb.MessageIdData(ledgerId=0, entryId=0)],
        ),
        pb.CommandRedeliverUnacknowledgedMessages(consumer_id=1),
        pb.CommandSeek(consumer_id=1, request_id=3, message_publish_time=1),
        pb.CommandLookupTopic(topic=topic, request_id=4),
        pb.CommandPartitionedTopicMetadata(topic=topic, request_id=5),
        pb.CommandGetTopicsOfNamespace(namespace="public/default", request_id=6),
        pb.CommandGetLastMessageId(consumer_id=1, request_id=7),
        pb.CommandUnsubscribe(consumer_id=1, request_id=8),
        pb.CommandCloseProducer(producer_id=1, request_id=9),
        pb.CommandCloseConsumer(consumer_id=1, request_id=10),
    ]  # fmt: skip
    frames = [encode_command(wrap(c)) for c in commands]
    return [connect, connect + b"".join(frames[:1]) + send, connect + b"".join(frames) + send] + [
        connect + frame for frame in frames
    ]


def main() -> None:
    corpus = [Path(a) for a in sys.argv[1:] if not a.startswith("-")]
    if corpus and corpus[0].is_dir() and not any(corpus[0].iterdir()):
        for i, seed in enumerate(seeds()):
            (corpus[0] / f"seed-{i}").write_bytes(seed)
    harness = Harness()

    atheris.Setup(sys.argv, harness.one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
