"""ServerCnx: one client connection, asyncio.Protocol on one side, the frame
codec and the broker service on the other.

Hot commands (SEND, FLOW, ACK, PING) are handled inline in data_received;
requests that wait for storage (PRODUCER, SUBSCRIBE, LOOKUP, ...) run as tasks
this connection owns. A frame we cannot parse, a command before CONNECT or an
oversize frame gets an ERROR, one log line and a closed connection; nothing
else is affected. Backpressure both ways: reading pauses while too many
publishes await their receipt; dispatch to this connection pauses while its
socket buffer is above the high-water mark.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any, cast

import structlog
from structlog.typing import FilteringBoundLogger

from magnetar.broker import commands
from magnetar.broker.auth.authentication import (
    AUTHENTICATION_REFUSED,
    AuthenticationFailed,
    AuthenticationService,
    Credentials,
)
from magnetar.broker.auth.tls import peer_common_name
from magnetar.broker.config import BrokerConfig
from magnetar.broker.connection.consumers import ConsumerCommands
from magnetar.broker.connection.limits import ConnectionLimiter
from magnetar.broker.connection.lookups import LookupCommands
from magnetar.broker.connection.producers import ProducerCommands
from magnetar.broker.connection.schemas import SchemaCommands
from magnetar.broker.connection.topic_lists import TopicListCommands
from magnetar.broker.eager import run_request
from magnetar.broker.errors import BrokerServiceError
from magnetar.broker.observability.metrics import BrokerMetrics
from magnetar.broker.service.broker_service import BrokerService, parse_topic
from magnetar.broker.storage.api import StorageError
from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.errors import (
    ChecksumMismatch,
    FrameTooLarge,
    ProtocolError,
    ServerError,
)
from magnetar.proto.frames import FRAME_HEADROOM, SEND_SCAN_COMPILED, Frame, FrameDecoder
from magnetar.proto.send_scan import SendHead

log = structlog.get_logger(__name__)

# Clients known to handle REACHED_END_OF_TOPIC. The C++ core (and so the
# Python, C++ and Node clients) closes the connection on it (WIRE 4), though
# it announces a protocol version that includes it.
_END_OF_TOPIC_CLIENTS = ("Pulsar-Java-",)
_END_OF_TOPIC_PROTOCOL = 9


def supports_reached_end_of_topic(client_version: str, protocol_version: int) -> bool:
    return protocol_version >= _END_OF_TOPIC_PROTOCOL and client_version.startswith(
        _END_OF_TOPIC_CLIENTS
    )


SERVER_VERSION = "Magnetar 0.1.0"
# Highest protocol version we speak (Pulsar's v20); the client checks >= 12
# for GET_LAST_MESSAGE_ID and multi-id ACK (WIRE "Protocol versions").
SERVER_PROTOCOL_VERSION = 20
# How long a client has to answer an AUTH_CHALLENGE with fresh credentials.
AUTH_RESPONSE_TIMEOUT_S = 10.0

T = pb.BaseCommand


class ServerCnx(asyncio.Protocol):
    def __init__(
        self,
        service: BrokerService,
        config: BrokerConfig,
        metrics: BrokerMetrics,
        on_closed: Callable[[ServerCnx], None] | None = None,
        limiter: ConnectionLimiter | None = None,
        authentication: AuthenticationService | None = None,
    ) -> None:
        self._service = service
        self._authentication = authentication
        self.role: str | None = None  # who the client authenticated as
        self._peer_cn: str | None = None  # CN of a verified TLS client certificate
        self._auth_method = ""
        self._supports_auth_refresh = False
        self._auth_timer: asyncio.TimerHandle | None = None  # expiry, then the answer
        self._limiter = limiter
        self._peer_ip: str | None = None  # holds a limiter slot while set
        self.config = config
        self.metrics = metrics
        self._on_closed = on_closed
        self._decoder = FrameDecoder(
            config.max_message_size + FRAME_HEADROOM, scan_sends=SEND_SCAN_COMPILED
        )
        self._transport: asyncio.Transport | None = None
        self._address = "?"
        self._log: FilteringBoundLogger = log
        self._connected = False  # CONNECT handled
        self._closed = False
        self.protocol_version = 0
        self.client_version = ""
        self.producer_commands = ProducerCommands(self)
        self.consumer_commands = ConsumerCommands(self)
        self._tasks: set[asyncio.Task[None]] = set()
        self._in_flight_publishes = 0
        self._in_flight_bytes = 0
        self._throttle: asyncio.TimerHandle | None = None  # publish rate pause
        self._reading_paused = False
        self._writable = True
        self._held: list[bytes] | None = None  # receipts and MESSAGEs to this turn's end
        self._received_since_tick = False
        self._ping_outstanding = False
        self._keepalive: asyncio.TimerHandle | None = None
        producer_commands = self.producer_commands
        consumer_commands = self.consumer_commands
        schema_commands = SchemaCommands(self)
        self.topic_list_commands = topic_lists = TopicListCommands(self)
        lookups = LookupCommands(self)
        self._handlers: dict[int, Callable[[Frame], None]] = {
            T.SEND: producer_commands.handle_send,
            T.FLOW: consumer_commands.handle_flow,
            T.ACK: consumer_commands.handle_ack,
            T.PING: self._handle_ping,
            T.PONG: lambda _f: None,
            T.REDELIVER_UNACKNOWLEDGED_MESSAGES: consumer_commands.handle_redeliver,
            T.PRODUCER: producer_commands.handle_producer,
            T.SUBSCRIBE: consumer_commands.handle_subscribe,
            T.CLOSE_PRODUCER: producer_commands.handle_close_producer,
            T.CLOSE_CONSUMER: consumer_commands.handle_close_consumer,
            T.UNSUBSCRIBE: consumer_commands.handle_unsubscribe,
            T.LOOKUP: lookups.handle_lookup,
            T.PARTITIONED_METADATA: lookups.handle_partitioned_metadata,
            T.GET_LAST_MESSAGE_ID: consumer_commands.handle_get_last_message_id,
            T.SEEK: consumer_commands.handle_seek,
            T.CONSUMER_STATS: consumer_commands.handle_consumer_stats,
            T.GET_TOPICS_OF_NAMESPACE: topic_lists.handle_topics_of_namespace,
            T.WATCH_TOPIC_LIST: topic_lists.handle_watch_topic_list,
            T.WATCH_TOPIC_LIST_CLOSE: topic_lists.handle_watch_topic_list_close,
            T.GET_SCHEMA: schema_commands.handle_get_schema,
            T.GET_OR_CREATE_SCHEMA: schema_commands.handle_get_or_create_schema,
            T.AUTH_RESPONSE: self._handle_auth_response,
            T.CONNECT: self._handle_connect_again,
        }

    # ------------------------------------ ClientConnection / CommandContext

    @property
    def service(self) -> BrokerService:
        return self._service

    @property
    def log(self) -> FilteringBoundLogger:
        return self._log

    @property
    def address(self) -> str:
        return self._address

    @property
    def is_writable(self) -> bool:
        return self._writable and not self._closed

    @property
    def is_closed(self) -> bool:
        return self._closed

    def write_frames(self, frames: list[bytes]) -> None:
        """Frames (or their parts, in order) held to the end of this loop turn
        and written as one: the receipts of many producers and the MESSAGEs
        of many topics' dispatchers that one group commit completes take one
        socket write. Anything written meanwhile flushes them first."""
        if self._transport is None or self._closed:
            return
        held = self._held
        if held is None:
            self._held = held = []
            asyncio.get_running_loop().call_soon(self._flush_held)
        held.extend(frames)

    def write(self, frame: bytes) -> None:
        if self._transport is not None and not self._closed:
            if self._held is not None:
                self._flush_held()  # they were queued first
            self._transport.write(frame)

    def _flush_held(self) -> None:
        held, self._held = self._held, None
        transport = self._transport
        if not held or transport is None or self._closed:
            return
        transport.write(held[0] if len(held) == 1 else b"".join(held))

    def publish_started(self, size: int) -> None:
        self._in_flight_publishes += 1
        self._in_flight_bytes += size
        config = self.config
        if not self._reading_paused and (
            self._in_flight_publishes >= config.max_pending_publish_per_connection
            or self._in_flight_bytes >= config.max_pending_publish_bytes_per_connection
        ):
            self._reading_paused = True
            self.metrics.read_pauses.inc()
            assert self._transport is not None
            self._transport.pause_reading()

    def throttle_reading(self, seconds: float) -> None:
        if self._throttle is not None or self._closed or self._transport is None:
            return
        self.metrics.publish_throttles.inc()
        self._transport.pause_reading()
        self._throttle = asyncio.get_running_loop().call_later(seconds, self._end_throttle)

    def _end_throttle(self) -> None:
        self._throttle = None
        if self._closed:
            return
        self.data_received(b"")  # what arrived meanwhile, in order
        if self._throttle is None and not self._reading_paused and self._transport is not None:
            self._transport.resume_reading()

    def publish_completed(self, size: int, count: int = 1) -> None:
        self._in_flight_publishes -= count
        self._in_flight_bytes -= size
        config = self.config
        if (
            self._reading_paused
            and self._in_flight_publishes <= config.max_pending_publish_per_connection // 2
            and self._in_flight_bytes <= config.max_pending_publish_bytes_per_connection // 2
        ):
            self._reading_paused = False
            if self._transport is not None and not self._closed and self._throttle is None:
                self._transport.resume_reading()

    def producer_closed_by_broker(self, producer_id: int) -> None:
        self.producer_commands.closed_by_broker(producer_id)
        self.write(commands.close_producer(producer_id))

    def consumer_closed_by_broker(self, consumer_id: int) -> None:
        self.consumer_commands.closed_by_broker(consumer_id)
        self.write(commands.close_consumer(consumer_id))

    def watch_topic_update(
        self, watcher_id: int, new: list[str], deleted: list[str], digest: str
    ) -> None:
        self.write(commands.watch_topic_update(watcher_id, new, deleted, digest))

    def active_consumer_changed(self, consumer_id: int, is_active: bool) -> None:
        self.write(commands.active_consumer_change(consumer_id, is_active))

    def reached_end_of_topic(self, consumer_id: int) -> None:
        if supports_reached_end_of_topic(self.client_version, self.protocol_version):
            self.write(commands.reached_end_of_topic(consumer_id))

    # ------------------------------------------------------ asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement the interface without subclassing it.
        transport = cast(asyncio.Transport, transport)
        self._transport = transport
        peer = transport.get_extra_info("peername")
        self._address = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self._log = log.bind(remote=self._address)
        self._peer_cn = peer_common_name(transport.get_extra_info("ssl_object"))
        if self._limiter is not None:
            ip = str(peer[0]) if isinstance(peer, tuple) else str(peer)
            refusal = self._limiter.admit(ip)
            if refusal is not None:
                self._refuse(transport, refusal)
                return
            self._peer_ip = ip
        hwm = self.config.connection_write_high_water_mark
        transport.set_write_buffer_limits(high=hwm, low=hwm // 4)
        self.metrics.connections.inc()
        self.metrics.connections_opened.inc()
        self._schedule_keepalive()

    def _refuse(self, transport: asyncio.Transport, reason: str) -> None:
        """Over a connection limit: say why, close, and hold nothing."""
        self._log.warning("connection refused", reason=reason)
        self.metrics.connection_errors.labels(reason="connection limit").inc()
        transport.write(commands.error(0, ServerError.NotAllowedError, reason))
        self._closed = True
        transport.close()
        if self._on_closed is not None:
            self._on_closed(self)

    def data_received(self, data: bytes) -> None:
        if self._closed:
            return
        self._received_since_tick = True
        decoder = self._decoder
        decoder.feed(data)
        handlers: dict[int, Callable[[Any], None]] = self._handlers
        send_head: Callable[[Any], None] | None = self.producer_commands.handle_send_head
        while True:
            try:
                frame = decoder.next_frame_or_send()
            except ChecksumMismatch as exc:
                self._checksum_failed(exc)
                continue
            except FrameTooLarge as exc:
                self._protocol_violation("frame too large", str(exc))
                return
            except ProtocolError as exc:
                self._protocol_violation("unparseable frame", str(exc))
                return
            if frame is None:
                return
            if type(frame) is SendHead:  # a SEND read without protobuf (send_scan)
                command_type, handler = T.SEND, send_head
            else:
                assert type(frame) is Frame
                command_type = frame.command.type
                handler = handlers.get(command_type)
            if not self._connected and command_type != T.CONNECT:
                self._protocol_violation(
                    "command before connect", f"{frame.name} received before CONNECT"
                )
                return
            if type(frame) is Frame and command_type == T.CONNECT and not self._connected:
                self._handle_connect(frame)
                continue
            if handler is None:
                self._unsupported(cast(Frame, frame))
                continue
            try:
                handler(frame)
            except ProtocolError as exc:
                self._protocol_violation("invalid command", f"{frame.name}: {exc}")
                return
            except Exception:
                # Our bug, not the peer's: drop this connection only.
                self.log.exception("command handler failed", command=frame.name)
                self.metrics.connection_errors.labels(reason="internal error").inc()
                self.close()
                return
            if self._closed:
                return
            if self._throttle is not None:
                # Over a publish rate: the rest waits in the decoder until
                # the pause ends (pause_reading alone would not stop frames
                # already received).
                return

    def pause_writing(self) -> None:
        self._writable = False

    def resume_writing(self) -> None:
        self._writable = True
        self.consumer_commands.consumers_writable()

    def connection_lost(self, exc: Exception | None) -> None:
        self._shutdown_connection()

    # ------------------------------------------------------------- closing

    def close(self) -> None:
        """Close the socket; producers and consumers are detached at once."""
        if self._held is not None:
            self._flush_held()  # what this turn answered goes out first
        transport = self._transport
        self._shutdown_connection()
        if transport is not None:
            transport.close()

    def _shutdown_connection(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._keepalive is not None:
            self._keepalive.cancel()
            self._keepalive = None
        for timer in (self._throttle, self._auth_timer):
            if timer is not None:
                timer.cancel()
        self._throttle = self._auth_timer = None
        self.producer_commands.detach_all()
        self.consumer_commands.detach_all()
        self.topic_list_commands.detach_all()
        self.metrics.connections.dec()
        if self._limiter is not None and self._peer_ip is not None:
            self._limiter.release(self._peer_ip)
            self._peer_ip = None
        if self._on_closed is not None:
            self._on_closed(self)

    async def wait_closed(self) -> None:
        """Wait for request handlers still running after the close."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def _protocol_violation(self, reason: str, detail: str) -> None:
        # One line per bad connection; the peer gets the reason before the close.
        self.log.warning("closing connection: protocol violation", reason=reason, detail=detail)
        self.metrics.connection_errors.labels(reason=reason).inc()
        self.write(commands.error(0, ServerError.NotAllowedError, f"{reason}: {detail}"))
        self.close()

    def _checksum_failed(self, exc: ChecksumMismatch) -> None:
        frame = exc.frame
        if isinstance(frame, Frame) and frame.command.type == T.SEND:
            send = frame.command.send
            self.log.warning(
                "SEND with a bad checksum", producer_id=send.producer_id, detail=str(exc)
            )
            self.write(
                commands.send_error(
                    send.producer_id, send.sequence_id, ServerError.ChecksumError, str(exc)
                )
            )
        else:
            self.log.warning("frame with a bad checksum ignored", detail=str(exc))

    def _unsupported(self, frame: Frame) -> None:
        body = frame.body
        request_id = getattr(body, "request_id", None)
        self.log.info("unsupported command", command=frame.name)
        if isinstance(request_id, int):
            self.write(
                commands.error(
                    request_id,
                    ServerError.NotAllowedError,
                    f"{frame.name} is not supported by this broker",
                )
            )

    # ----------------------------------------------------------- keepalive

    def _schedule_keepalive(self) -> None:
        loop = asyncio.get_running_loop()
        self._keepalive = loop.call_later(
            self.config.keepalive_interval_seconds, self._keepalive_tick
        )

    def _keepalive_tick(self) -> None:
        if self._closed:
            return
        if self._received_since_tick:
            self._received_since_tick = False
            self._ping_outstanding = False
        elif not self._connected or self._ping_outstanding:
            # Silent for a whole interval after our PING (or never connected).
            self.log.info("closing idle connection", connected=self._connected)
            self.close()
            return
        else:
            self._ping_outstanding = True
            self.write(commands.ping())
        self._schedule_keepalive()

    # -------------------------------------------------------------- helpers

    def spawn(
        self, coro: Coroutine[Any, Any, None], request_id: int, what: str, eager: bool = False
    ) -> asyncio.Task[None] | None:
        return run_request(self._tasks, self._guard(coro, request_id, what), eager)

    async def _guard(self, coro: Coroutine[Any, Any, None], request_id: int, what: str) -> None:
        try:
            await coro
        except BrokerServiceError as exc:
            self.log.info("request failed", request=what, error=exc.code.name, detail=exc.message)
            self.write(commands.error(request_id, exc.code, exc.message))
        except StorageError as exc:
            self.log.warning("request failed in storage", request=what, detail=str(exc))
            code = ServerError.ServiceNotReady if exc.retriable else ServerError.PersistenceError
            self.write(commands.error(request_id, code, f"{what} failed: {exc}"))
        except Exception as exc:
            self.log.exception("request failed unexpectedly", request=what)
            self.write(commands.error(request_id, ServerError.UnknownError, f"{what}: {exc!r}"))

    # ------------------------------------------------------------ handshake

    def _handle_connect(self, frame: Frame) -> None:
        connect = frame.command.connect
        client_version = connect.protocol_version
        self.protocol_version = min(client_version, SERVER_PROTOCOL_VERSION)
        self.client_version = connect.client_version
        if self._authentication is not None:
            self._supports_auth_refresh = connect.feature_flags.supports_auth_refresh
            try:
                credentials = self._authentication.authenticate(
                    connect.auth_method_name, connect.auth_data, self._peer_cn
                )
            except AuthenticationFailed as exc:
                self._authentication_failed(connect.auth_method_name, exc)
                return
            self.role = credentials.role
            self._auth_method = credentials.method
            self._watch_expiry(credentials)
        self._connected = True
        self._log = self._log.bind(client=connect.client_version)
        self.write(
            commands.connected(SERVER_VERSION, self.protocol_version, self.config.max_message_size)
        )

    # --------------------------------------------------- re-authentication

    def _authentication_failed(self, method: str, exc: AuthenticationFailed) -> None:
        # The remote address and the reason; never the credentials.
        self.log.warning("authentication failed", method=method, reason=str(exc))
        self.metrics.connection_errors.labels(reason="authentication").inc()
        self.write(commands.error(0, ServerError.AuthenticationError, AUTHENTICATION_REFUSED))
        self.close()

    def _watch_expiry(self, credentials: Credentials) -> None:
        if self._auth_timer is not None:
            self._auth_timer.cancel()
            self._auth_timer = None
        if credentials.expires_at is not None:
            delay = max(0.0, credentials.expires_at - time.time())
            loop = asyncio.get_running_loop()
            self._auth_timer = loop.call_later(delay, self._credentials_expired)

    def _credentials_expired(self) -> None:
        """Pulsar's refresh: challenge a client that supports it (it answers
        with fresh credentials); close the connection of one that does not."""
        self._auth_timer = None
        if self._closed:
            return
        if not self._supports_auth_refresh:
            self.log.info("credentials expired: closing", role=self.role)
            self.close()
            return
        self.write(
            commands.auth_challenge(SERVER_VERSION, self.protocol_version, self._auth_method)
        )
        self._auth_timer = asyncio.get_running_loop().call_later(
            AUTH_RESPONSE_TIMEOUT_S, self._no_auth_response
        )

    def _no_auth_response(self) -> None:
        self._auth_timer = None
        self.log.warning("no AUTH_RESPONSE to the refresh challenge: closing", role=self.role)
        self.close()

    def _handle_auth_response(self, frame: Frame) -> None:
        if self._authentication is None:
            raise ProtocolError("AUTH_RESPONSE while authentication is off")
        answer = frame.command.authResponse.response
        try:
            credentials = self._authentication.authenticate(
                answer.auth_method_name, answer.auth_data, self._peer_cn
            )
        except AuthenticationFailed as exc:
            self._authentication_failed(answer.auth_method_name, exc)
            return
        if credentials.role != self.role:
            self._authentication_failed(
                answer.auth_method_name,
                AuthenticationFailed("the refreshed credentials name another role"),
            )
            return
        self._watch_expiry(credentials)

    def _handle_connect_again(self, frame: Frame) -> None:
        raise ProtocolError("CONNECT received twice on one connection")

    def _handle_ping(self, frame: Frame) -> None:
        self.write(commands.pong())

    async def authorize(self, action: str, topic: str, denied: str = "") -> None:
        """AuthorizationError unless this client's role may produce / consume
        (action "lookup": either) on the topic; nothing without authorization.
        `denied` is the refusal's text where clients match Pulsar's own."""
        authorization = self.service.authorization
        if authorization is None:
            return
        name = parse_topic(topic)
        # A namespace that does not exist is TopicNotFound for everyone, as
        # in Pulsar (the official client expects that result).
        await self.service.check_namespace(name)
        role = self.role or ""
        check = {
            "produce": authorization.can_produce,
            "consume": authorization.can_consume,
            "lookup": authorization.can_lookup,
        }[action]
        if not await check(role, name):
            reason = f"role {role!r} may not {action} on {name}"
            if denied:
                # The client gets Pulsar's text; the log keeps who and what.
                self.log.info("not authorized", reason=reason)
            raise BrokerServiceError(ServerError.AuthorizationError, denied or reason)
