"""ClientConnection: one TCP connection to one broker, shared by producers and consumers.

One reader task decodes frames and routes them: responses by request id to
the future waiting for them, receipts and messages by producer or consumer id
to the registered endpoint. A keepalive task PINGs every interval and drops a
connection that stayed silent for a whole interval (WIRE 16). Closing, for
whatever reason, fails every pending request with a ConnectError chained to
the cause and tells every registered endpoint, which reconnect on their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from typing import Protocol

from google.protobuf.message import Message

from magnetar.client.aio.errors import (
    AlreadyClosed,
    ConnectError,
    PulsarException,
    Timeout,
    from_server_error,
)
from magnetar.client.aio.log import get_logger
from magnetar.client.aio.net import commands
from magnetar.client.aio.net.security import NO_SECURITY, Security
from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.errors import ChecksumMismatch
from magnetar.proto.frames import (
    DEFAULT_MAX_MESSAGE_SIZE,
    FRAME_HEADROOM,
    Frame,
    FrameDecoder,
    command_name,
)

_log = get_logger("magnetar.client.connection")

T = pb.BaseCommand
_READ_SIZE = 256 * 1024
_PING = commands.ping()
_PONG = commands.pong()

# Responses matched to a request by their body's request_id.
_RESPONSE_TYPES = frozenset(
    {
        T.SUCCESS,
        T.ERROR,
        T.PRODUCER_SUCCESS,
        T.LOOKUP_RESPONSE,
        T.PARTITIONED_METADATA_RESPONSE,
        T.GET_LAST_MESSAGE_ID_RESPONSE,
        T.GET_TOPICS_OF_NAMESPACE_RESPONSE,
        T.GET_SCHEMA_RESPONSE,
        T.ACK_RESPONSE,
        T.CONSUMER_STATS_RESPONSE,
        T.WATCH_TOPIC_LIST_SUCCESS,
    }
)


class ProducerEndpoint(Protocol):
    """What a connection calls on a producer registered with it."""

    def handle_send_receipt(self, receipt: pb.CommandSendReceipt) -> None: ...
    def handle_send_error(self, error: pb.CommandSendError) -> None: ...
    def handle_close_producer(self) -> None: ...
    def connection_closed(self, cnx: ClientConnection) -> None: ...


class ConsumerEndpoint(Protocol):
    """What a connection calls on a consumer registered with it."""

    def handle_message(self, frame: Frame) -> None: ...
    def handle_bad_checksum(self, frame: Frame) -> None: ...
    def handle_close_consumer(self) -> None: ...
    def handle_active_consumer_change(self, is_active: bool) -> None: ...
    def connection_closed(self, cnx: ClientConnection) -> None: ...


class TopicListWatcherEndpoint(Protocol):
    """What a connection calls on a topic list watcher registered with it."""

    def handle_topic_update(self, update: pb.CommandWatchTopicUpdate) -> None: ...
    def connection_closed(self, cnx: ClientConnection) -> None: ...


def split_address(address: str) -> tuple[str, int]:
    """`host:port` (also `[v6]:port`) as a (host, port) pair."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"address {address!r} is not host:port")
    return host.strip("[]"), int(port)


class ClientConnection:
    """A connected, handshaken connection; create it with `ClientConnection.open`."""

    def __init__(
        self,
        address: str,
        *,
        operation_timeout: float = 30.0,
        keepalive_interval: float = 30.0,
        security: Security = NO_SECURITY,
    ) -> None:
        self.address = address
        self.security = security
        self.operation_timeout = operation_timeout
        self.keepalive_interval = keepalive_interval
        self.max_message_size = DEFAULT_MAX_MESSAGE_SIZE
        self.server_version = ""
        self.protocol_version = 0
        # CONNECTED's feature flag: the broker serves WATCH_TOPIC_LIST.
        self.supports_topic_watchers = False
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._decoder = FrameDecoder()
        self._requests: dict[int, asyncio.Future[Frame]] = {}
        self._request_ids = itertools.count(1)
        self._producers: dict[int, ProducerEndpoint] = {}
        self._consumers: dict[int, ConsumerEndpoint] = {}
        self._watchers: dict[int, TopicListWatcherEndpoint] = {}
        self._handshake: asyncio.Future[pb.CommandConnected] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._heard_from_broker = True
        self._closed = False
        self.close_cause: BaseException | None = None
        self._log = _log.bind(broker=address)

    # -- lifecycle -------------------------------------------------------

    @classmethod
    async def open(
        cls,
        address: str,
        *,
        connection_timeout: float = 10.0,
        operation_timeout: float = 30.0,
        keepalive_interval: float = 30.0,
        security: Security = NO_SECURITY,
    ) -> ClientConnection:
        """Connect to `host:port` (over TLS when `security` says so) and
        complete the CONNECT handshake, authenticated when it says so."""
        cnx = cls(
            address,
            operation_timeout=operation_timeout,
            keepalive_interval=keepalive_interval,
            security=security,
        )
        await cnx._connect(connection_timeout)
        return cnx

    async def _connect(self, timeout: float) -> None:  # noqa: ASYNC109 (connect deadline)
        host, port = split_address(self.address)
        try:
            context = self.security.ssl_context()
            await self.security.prepare_auth()
            method, data = self.security.connect_auth()
        except PulsarException:
            self._closed = True
            raise
        try:
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(
                    host,
                    port,
                    limit=_READ_SIZE,
                    ssl=context,
                    server_hostname=host.strip("[]") if context is not None else None,
                ),
                timeout,
            )
        except (OSError, TimeoutError) as exc:
            self._closed = True
            raise ConnectError(f"cannot connect to {self.address}: {exc}") from exc
        loop = asyncio.get_running_loop()
        self._handshake = loop.create_future()
        self._tasks.append(loop.create_task(self._read_loop(), name=f"pulsar-read-{self.address}"))
        # AUTH_CHALLENGE is answered (below), as CONNECT tells the broker.
        self.write(commands.encode(commands.connect(method, data)))
        try:
            connected = await asyncio.wait_for(asyncio.shield(self._handshake), timeout)
        except TimeoutError:
            await self.close(ConnectError(f"no CONNECTED from {self.address} within {timeout}s"))
            raise ConnectError(f"no CONNECTED from {self.address} within {timeout}s") from None
        except PulsarException:
            await self.close()
            raise
        self.server_version = connected.server_version
        self.protocol_version = connected.protocol_version
        self.supports_topic_watchers = connected.feature_flags.supports_topic_watchers
        if connected.HasField("max_message_size") and connected.max_message_size > 0:
            self.max_message_size = connected.max_message_size
        self._decoder.max_frame_size = self.max_message_size + FRAME_HEADROOM
        if self.keepalive_interval > 0:
            self._tasks.append(
                loop.create_task(self._keepalive_loop(), name=f"pulsar-keepalive-{self.address}")
            )
        self._log.debug("connected", server_version=self.server_version)

    @property
    def is_closed(self) -> bool:
        return self._closed

    @property
    def finished(self) -> bool:
        """Closed, and its tasks have ended."""
        return self._closed and all(task.done() for task in self._tasks)

    def abort(self, cause: BaseException | None) -> None:
        """Close now without waiting (idempotent): fail requests, notify endpoints,
        stop tasks. `close()` does the same and then awaits the tasks."""
        if self._closed:
            return
        self._closed = True
        self.close_cause = cause
        if isinstance(cause, AlreadyClosed):
            self._log.debug("connection closed", cause=str(cause))
        elif cause is not None:
            self._log.info("connection lost", cause=str(cause))
        if self._writer is not None:
            self._writer.close()
        error = ConnectError(f"connection to {self.address} closed")
        error.__cause__ = cause
        if self._handshake is not None and not self._handshake.done():
            self._handshake.set_exception(error)
            # Retrieved here so an abandoned handshake never logs "never retrieved".
            self._handshake.exception()
        requests, self._requests = self._requests, {}
        for future in requests.values():
            if not future.done():
                future.set_exception(error)
        producers, self._producers = self._producers, {}
        consumers, self._consumers = self._consumers, {}
        for producer in producers.values():
            producer.connection_closed(self)
        for consumer in consumers.values():
            consumer.connection_closed(self)
        watchers, self._watchers = self._watchers, {}
        for watcher in watchers.values():
            watcher.connection_closed(self)
        current = asyncio.current_task()
        for task in self._tasks:
            if task is not current:
                task.cancel()

    async def close(self, cause: BaseException | None = None) -> None:
        """Close and wait until the reader and keepalive tasks have ended."""
        self.abort(cause)
        current = asyncio.current_task()
        tasks = [task for task in self._tasks if task is not current]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._writer is not None:
            with contextlib.suppress(Exception):
                await self._writer.wait_closed()

    # -- endpoints -------------------------------------------------------

    def new_request_id(self) -> int:
        return next(self._request_ids)

    def register_producer(self, producer_id: int, producer: ProducerEndpoint) -> None:
        self._producers[producer_id] = producer

    def remove_producer(self, producer_id: int, producer: ProducerEndpoint) -> None:
        if self._producers.get(producer_id) is producer:
            del self._producers[producer_id]

    def register_consumer(self, consumer_id: int, consumer: ConsumerEndpoint) -> None:
        self._consumers[consumer_id] = consumer

    def remove_consumer(self, consumer_id: int, consumer: ConsumerEndpoint) -> None:
        if self._consumers.get(consumer_id) is consumer:
            del self._consumers[consumer_id]

    def register_watcher(self, watcher_id: int, watcher: TopicListWatcherEndpoint) -> None:
        self._watchers[watcher_id] = watcher

    def remove_watcher(self, watcher_id: int, watcher: TopicListWatcherEndpoint) -> None:
        if self._watchers.get(watcher_id) is watcher:
            del self._watchers[watcher_id]

    # -- writing ---------------------------------------------------------

    def write(self, data: bytes) -> None:
        """Queue bytes for the broker; a closed connection drops them (the owner resends)."""
        if self._closed or self._writer is None:
            return
        self._writer.write(data)

    def send_command(self, body: Message) -> None:
        """Write one Command* body (wrapped in its BaseCommand)."""
        self.write(commands.encode(body))

    async def request(
        self,
        body: Message,
        request_id: int,
        timeout: float | None = None,  # noqa: ASYNC109 (per-request deadline)
    ) -> Frame:
        """Send a Command* body carrying `request_id` and wait for its response frame.

        `timeout` defaults to the operation timeout; 0 waits without a deadline.

        An ERROR response raises the matching PulsarException; no answer within
        the operation timeout raises Timeout; a closed connection raises
        ConnectError.
        """
        if self._closed:
            raise ConnectError(f"connection to {self.address} is closed") from self.close_cause
        future: asyncio.Future[Frame] = asyncio.get_running_loop().create_future()
        self._requests[request_id] = future
        self.write(commands.encode(body))
        wait = self.operation_timeout if timeout is None else timeout
        try:
            if wait <= 0:  # no deadline (a producer queued for exclusive access)
                return await future
            return await asyncio.wait_for(future, wait)
        except TimeoutError:
            name = type(body).__name__
            raise Timeout(
                f"{name} request {request_id} to {self.address} got no answer in {wait}s"
            ) from None
        finally:
            self._requests.pop(request_id, None)

    # -- reading ---------------------------------------------------------

    async def _read_loop(self) -> None:
        reader = self._reader
        assert reader is not None
        decoder = self._decoder
        try:
            while True:
                data = await reader.read(_READ_SIZE)
                if not data:
                    raise ConnectError(f"broker {self.address} closed the connection")
                self._heard_from_broker = True
                decoder.feed(data)
                while True:
                    try:
                        frame = decoder.next_frame()
                    except ChecksumMismatch as exc:
                        self._on_bad_checksum(exc)
                        continue
                    if frame is None:
                        break
                    self._dispatch(frame)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.abort(exc)

    def _on_bad_checksum(self, exc: ChecksumMismatch) -> None:
        frame = exc.frame
        if isinstance(frame, Frame) and frame.type == T.MESSAGE:
            consumer = self._consumers.get(frame.command.message.consumer_id)
            if consumer is not None:
                consumer.handle_bad_checksum(frame)
                return
        raise exc

    def _dispatch(self, frame: Frame) -> None:
        kind = frame.command.type
        command = frame.command
        if kind == T.SEND_RECEIPT:
            producer = self._producers.get(command.send_receipt.producer_id)
            if producer is not None:
                producer.handle_send_receipt(command.send_receipt)
        elif kind == T.MESSAGE:
            consumer = self._consumers.get(command.message.consumer_id)
            if consumer is not None:
                consumer.handle_message(frame)
        elif kind in _RESPONSE_TYPES:
            self._on_response(frame)
        elif kind == T.SEND_ERROR:
            producer = self._producers.get(command.send_error.producer_id)
            if producer is not None:
                producer.handle_send_error(command.send_error)
        elif kind == T.PING:
            self.write(_PONG)
        elif kind == T.PONG:
            pass
        elif kind == T.CONNECTED:
            if self._handshake is not None and not self._handshake.done():
                self._handshake.set_result(command.connected)
        elif kind == T.AUTH_CHALLENGE:
            self._answer_challenge(command.authChallenge)
        elif kind == T.CLOSE_PRODUCER:
            producer = self._producers.pop(command.close_producer.producer_id, None)
            if producer is not None:
                producer.handle_close_producer()
        elif kind == T.CLOSE_CONSUMER:
            consumer = self._consumers.pop(command.close_consumer.consumer_id, None)
            if consumer is not None:
                consumer.handle_close_consumer()
        elif kind == T.ACTIVE_CONSUMER_CHANGE:
            change = command.active_consumer_change
            consumer = self._consumers.get(change.consumer_id)
            if consumer is not None:
                consumer.handle_active_consumer_change(change.is_active)
        elif kind == T.WATCH_TOPIC_UPDATE:
            update = command.watchTopicUpdate
            watcher = self._watchers.get(update.watcher_id)
            if watcher is not None:
                watcher.handle_topic_update(update)
        else:
            self._log.debug("ignored command", command=command_name(kind))

    def _answer_challenge(self, challenge: pb.CommandAuthChallenge) -> None:
        """The broker asks for fresh credentials (an expiring token, or a
        multi-step method): answer with what the authentication says now,
        after it had the chance to fetch a new one."""
        self._tasks = [task for task in self._tasks if not task.done()]
        self._tasks.append(
            asyncio.get_running_loop().create_task(
                self._answer(challenge), name=f"pulsar-auth-{self.address}"
            )
        )

    async def _answer(self, challenge: pb.CommandAuthChallenge) -> None:
        try:
            await self.security.prepare_auth(renew=True)
            method, data = self.security.connect_auth()
        except PulsarException as exc:
            self._log.warning("cannot answer an auth challenge", error=str(exc))
            self.abort(exc)
            return
        if self._closed:
            return
        method = method or challenge.challenge.auth_method_name
        self.send_command(commands.auth_response(method, data))

    def _on_response(self, frame: Frame) -> None:
        command = frame.command
        if self._handshake is not None and not self._handshake.done() and command.type == T.ERROR:
            # An ERROR before CONNECTED answers the CONNECT itself.
            self._handshake.set_exception(
                from_server_error(command.error.error, command.error.message)
            )
            return
        body = frame.body
        request_id: int = body.request_id  # type: ignore[attr-defined]
        future = self._requests.get(request_id)
        if future is None or future.done():
            return
        if command.type == T.ERROR:
            future.set_exception(from_server_error(command.error.error, command.error.message))
        elif command.type == T.PRODUCER_SUCCESS and not command.producer_success.producer_ready:
            # Queued behind an exclusive producer: a second PRODUCER_SUCCESS follows (WIRE 6).
            return
        else:
            future.set_result(frame)

    async def _keepalive_loop(self) -> None:
        while not self._closed:
            await asyncio.sleep(self.keepalive_interval)
            if not self._heard_from_broker:
                self.abort(
                    ConnectError(
                        f"broker {self.address} sent nothing for {self.keepalive_interval}s"
                    )
                )
                return
            self._heard_from_broker = False
            self.write(_PING)

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"ClientConnection({self.address}, {state})"
