"""A replicator's producer on a remote cluster (issue 45): one binary
protocol connection to the remote's broker, speaking as a client does
(CONNECT, LOOKUP, PRODUCER, SEND), built on proto/ alone: the broker never
imports the client package.

`RemoteProducer.open` connects (following LOOKUP redirects to the topic's
owner), authenticates with the remote cluster's credentials and opens the
producer; `send` pipelines SENDs (buffered until `drain`: one socket write
for many) and `on_stored` gets what each was of at its SEND_RECEIPT, once
per read of the socket for all the receipts in it (one cursor update for
many entries, not a future and a callback each). Any failure (an ERROR, a
SEND_ERROR, the broker closing the producer, the connection dropping) fails
`failed` and drops every pending send, and the owner opens a new producer:
nothing here retries.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import ssl
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple
from urllib.parse import urlsplit

from google.protobuf.message import Message

from magnetar.broker.storage.api import Position
from magnetar.proto import fastpath, pulsar_api_pb2 as pb
from magnetar.proto.errors import ServerError
from magnetar.proto.frames import Frame, FrameDecoder, encode_command, wrap
from magnetar.proto.replica_scan import Receipt

T = pb.BaseCommand
CLIENT_VERSION = "magnetar-replicator"
PROTOCOL_VERSION = 20
_MAX_REDIRECTS = 8


class RemoteError(Exception):
    """The remote refused or the connection failed; `code` is the remote's
    ServerError when it answered one."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code

    @property
    def is_auth(self) -> bool:
        return self.code in (ServerError.AuthenticationError, ServerError.AuthorizationError)


class Sent(NamedTuple):
    """What a send was of: handed back at its receipt."""

    position: Position
    messages: int
    size: int


@dataclass(frozen=True, slots=True)
class Credentials:
    """What CONNECT carries: Pulsar's auth method name and its data."""

    method: str = ""
    data: bytes = b""


def _address(url: str, tls: bool) -> tuple[str, int]:
    parts = urlsplit(url)
    scheme = "pulsar+ssl" if tls else "pulsar"
    if parts.scheme != scheme or not parts.hostname:
        raise RemoteError(f"unsupported broker service URL {url!r} ({scheme}://host:port)")
    return parts.hostname, parts.port or (6651 if tls else 6650)


class RemoteProducer:
    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        credentials: Credentials,
        timeout: float,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._credentials = credentials
        self._timeout = timeout
        self._tls = tls
        self._decoder = FrameDecoder()
        self._requests = itertools.count(1)
        self._producer_id = 1
        self._pending: deque[tuple[int, Sent]] = deque()
        # Frames of sends not yet written (drain writes them at once).
        self._out: list[bytes] = []
        # Told of sends the remote stored, oldest first.
        self.on_stored: Callable[[list[Sent]], None] = lambda _sent: None
        # Set when receipts came in (wait_for_room re-checks).
        self._room: asyncio.Future[None] | None = None
        # Requests answered while the read loop runs, by request id.
        self._waiting: dict[int, asyncio.Future[Frame]] = {}
        self.failed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._reading: asyncio.Task[None] | None = None
        self.last_sequence_id = -1
        # The remote broker it is connected to (after lookup redirects).
        self.url = ""

    # ------------------------------------------------------------ opening

    @classmethod
    async def open(
        cls,
        url: str,
        topic: str,
        producer_name: str,
        credentials: Credentials,
        time_limit: float = 10.0,
        tls: ssl.SSLContext | None = None,
    ) -> RemoteProducer:
        """Connect to the broker that serves `topic` on the remote (over TLS
        with `tls`: `url` is then a pulsar+ssl:// one) and open the producer
        there; RemoteError (or OSError) when it cannot."""
        for _ in range(_MAX_REDIRECTS):
            connection = await cls._connect(url, credentials, time_limit, tls)
            try:
                owner = await connection._lookup(topic)
                if owner is None or owner == url:
                    connection.url = url
                    await connection._create_producer(topic, producer_name)
                    connection._reading = asyncio.get_running_loop().create_task(
                        connection._read_loop(), name=f"replicator-read {topic}"
                    )
                    return connection
            except BaseException:
                await connection.close()
                raise
            await connection.close()
            url = owner
        raise RemoteError(f"too many lookup redirects for {topic}")

    @classmethod
    async def _connect(
        cls, url: str, credentials: Credentials, time_limit: float, tls: ssl.SSLContext | None
    ) -> RemoteProducer:
        host, port = _address(url, tls is not None)
        async with asyncio.timeout(time_limit):
            reader, writer = await asyncio.open_connection(host, port, ssl=tls)
        connection = cls(reader, writer, credentials, time_limit, tls)
        try:
            connect = pb.CommandConnect(
                client_version=CLIENT_VERSION, protocol_version=PROTOCOL_VERSION
            )
            connect.feature_flags.supports_auth_refresh = True
            if credentials.method:
                connect.auth_method_name = credentials.method
                connect.auth_data = credentials.data
            connection._write(connect)
            while True:
                frame = await connection._next_frame()
                if frame.type == T.CONNECTED:
                    return connection
                if frame.type == T.AUTH_CHALLENGE:
                    connection._answer_challenge()
                    continue
                if frame.type == T.ERROR:
                    error = frame.command.error
                    raise RemoteError(f"connect refused: {error.message}", error.error)
                raise RemoteError(f"unexpected {frame.name} while connecting")
        except BaseException:
            await connection.close()
            raise

    async def _lookup(self, topic: str) -> str | None:
        """The URL of the broker that serves `topic` (None: this one)."""
        authoritative = False
        while True:
            request_id = next(self._requests)
            self._write(
                pb.CommandLookupTopic(
                    topic=topic, request_id=request_id, authoritative=authoritative
                )
            )
            frame = await self._response(request_id)
            answer = frame.command.lookupTopicResponse
            if frame.type == T.ERROR or answer.response == answer.Failed:
                error = frame.command.error if frame.type == T.ERROR else answer
                raise RemoteError(f"lookup of {topic} failed: {error.message}", error.error)
            url = answer.brokerServiceUrlTls if self._tls is not None else answer.brokerServiceUrl
            if answer.response == answer.Connect:
                return url or None
            return url  # Redirect: ask the named broker

    async def _create_producer(self, topic: str, producer_name: str) -> None:
        request_id = next(self._requests)
        self._write(
            pb.CommandProducer(
                topic=topic,
                producer_id=self._producer_id,
                request_id=request_id,
                producer_name=producer_name,
                user_provided_producer_name=True,
            )
        )
        frame = await self._response(request_id)
        if frame.type == T.ERROR:
            error = frame.command.error
            raise RemoteError(f"producer refused on {topic}: {error.message}", error.error)
        if frame.type != T.PRODUCER_SUCCESS:
            raise RemoteError(f"unexpected {frame.name} for PRODUCER")
        self.last_sequence_id = frame.command.producer_success.last_sequence_id

    async def _response(self, request_id: int) -> Frame:
        while True:
            frame = await self._next_frame()
            if frame.type == T.PING:
                self._writer.write(encode_command(T(type=T.PONG, pong=pb.CommandPong())))
                continue
            if frame.type == T.AUTH_CHALLENGE:
                self._answer_challenge()
                continue
            body = frame.body
            if getattr(body, "request_id", request_id) == request_id:
                return frame

    async def _next_frame(self) -> Frame:
        async with asyncio.timeout(self._timeout):
            while True:
                frame = self._decoder.next_frame()
                if frame is not None:
                    return frame
                data = await self._reader.read(65536)
                if not data:
                    raise RemoteError("the remote broker closed the connection")
                self._decoder.feed(data)

    def _answer_challenge(self) -> None:
        credentials = self._credentials
        self._write(
            pb.CommandAuthResponse(
                client_version=CLIENT_VERSION,
                response=pb.AuthData(
                    auth_method_name=credentials.method, auth_data=credentials.data
                ),
                protocol_version=PROTOCOL_VERSION,
            )
        )

    def _write(self, body: Message) -> None:
        self._flush()  # after the sends before it
        self._writer.write(encode_command(wrap(body)))

    def _flush(self) -> None:
        if self._out:
            self._writer.write(b"".join(self._out))
            self._out.clear()

    # ------------------------------------------------------------ sending

    def send(self, sequence_id: int, data: bytes, sent: Sent) -> None:
        """Queue one entry (written at the next drain); `on_stored` gets
        `sent` at its receipt (a duplicate's receipt too: the remote has it
        either way)."""
        if self.failed.done():
            raise RemoteError("the remote producer failed")
        self._pending.append((sequence_id, sent))
        self._out.append(
            fastpath.send_frame(self._producer_id, sequence_id, sent.messages, sequence_id, data)
        )

    async def schema_version(self, topic: str, schema: pb.Schema) -> bytes:
        """The remote's version of `schema` on `topic`, registering it there
        (GET_OR_CREATE_SCHEMA, as Pulsar's replicator producer does)."""
        request_id = next(self._requests)
        answer: asyncio.Future[Frame] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = answer
        self._write(pb.CommandGetOrCreateSchema(request_id=request_id, topic=topic, schema=schema))
        try:
            async with asyncio.timeout(self._timeout):
                frame = await answer
        finally:
            self._waiting.pop(request_id, None)
        body = frame.command.getOrCreateSchemaResponse
        if body.HasField("error_code"):
            raise RemoteError(f"schema refused on {topic}: {body.error_message}", body.error_code)
        return bytes(body.schema_version)

    async def drain(self) -> None:
        """Write the queued sends; wait while the socket's buffer is full."""
        self._flush()
        await self._writer.drain()

    @property
    def pending(self) -> int:
        """Sends that await their receipts."""
        return len(self._pending)

    async def wait_for_room(self, limit: int) -> None:
        """Wait while `limit` sends or more await their receipts; RemoteError
        once the producer failed."""
        while len(self._pending) >= limit and not self.failed.done():
            room = self._room = asyncio.get_running_loop().create_future()
            await asyncio.wait({room, self.failed}, return_when=asyncio.FIRST_COMPLETED)
        if self.failed.done():
            self.failed.result()

    async def _read_loop(self) -> None:
        try:
            while True:
                data = await self._reader.read(65536)
                if not data:
                    raise RemoteError("the remote broker closed the connection")
                decoder = self._decoder
                decoder.feed(data)
                stored: list[Sent] = []
                try:
                    while (frame := decoder.next_frame_or_receipt()) is not None:
                        if isinstance(frame, Receipt):
                            self._receipt(frame.sequence_id, stored)
                        else:
                            self._handle(frame, stored)
                finally:
                    if stored:  # also those before a failing frame
                        self.on_stored(stored)
                        room = self._room
                        if room is not None and not room.done():
                            room.set_result(None)
        except Exception as exc:  # whatever ends the reading fails the producer
            self._fail(exc if isinstance(exc, RemoteError) else RemoteError(repr(exc)))

    def _receipt(self, sequence_id: int, stored: list[Sent]) -> None:
        """What the receipt for `sequence_id` confirms (the connection has
        this one producer)."""
        pending = self._pending
        while pending and pending[0][0] <= sequence_id:
            stored.append(pending.popleft()[1])

    def _handle(self, frame: Frame, stored: list[Sent]) -> None:
        kind = frame.type
        if kind == T.SEND_RECEIPT:
            self._receipt(frame.command.send_receipt.sequence_id, stored)
        elif kind == T.SEND_ERROR:
            refused = frame.command.send_error
            raise RemoteError(f"send refused: {refused.message}", refused.error)
        elif kind == T.CLOSE_PRODUCER:
            raise RemoteError("the remote broker closed the producer")
        elif kind == T.GET_OR_CREATE_SCHEMA_RESPONSE:
            request_id = frame.command.getOrCreateSchemaResponse.request_id
            waiting = self._waiting.get(request_id)
            if waiting is not None and not waiting.done():
                waiting.set_result(frame)
        elif kind == T.PING:
            self._write(pb.CommandPong())
        elif kind == T.AUTH_CHALLENGE:
            self._answer_challenge()
        elif kind == T.ERROR:
            error = frame.command.error
            raise RemoteError(f"remote error: {error.message}", error.error)

    def _fail(self, error: RemoteError) -> None:
        if not self.failed.done():
            self.failed.set_exception(error)
            self.failed.exception()  # retrieved: the owner may be elsewhere
        self._pending.clear()  # resent from the cursor by the next producer
        self._out.clear()
        for waiting in self._waiting.values():
            if not waiting.done():
                waiting.set_exception(error)
                waiting.exception()

    async def close(self) -> None:
        """Close the connection; pending sends fail. Idempotent."""
        self._fail(RemoteError("the replicator closed its producer"))
        if self._reading is not None:
            self._reading.cancel()
            await asyncio.gather(self._reading, return_exceptions=True)
        self._writer.close()
        with contextlib.suppress(OSError, ConnectionError):
            await self._writer.wait_closed()
