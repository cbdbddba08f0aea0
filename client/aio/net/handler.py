"""ConnectionHandler: the connect / reconnect life shared by producers and consumers.

The first attach retries retriable errors with backoff until the operation
timeout; after that, a lost connection starts a reconnect task that retries
(bounded, jittered backoff) until it attaches again, the endpoint is closed,
or the broker answers with a fatal error.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import enum
import time

from magnetar.client.aio.errors import (
    AlreadyClosed,
    AuthenticationError,
    AuthorizationError,
    ConnectError,
    IncompatibleSchema,
    NotAllowedError,
    ProducerFenced,
    PulsarException,
    Timeout,
    TopicNotFound,
    TopicTerminated,
)
from magnetar.client.aio.log import get_logger
from magnetar.client.aio.net.connection import ClientConnection
from magnetar.client.aio.net.context import ClientContext
from magnetar.proto.naming import TopicName

_log = get_logger("magnetar.client")

# Errors that end reconnecting. Others that fail a first attach at once
# (ProducerBusy, ConsumerBusy...) are retried here: after a drop the broker may
# still hold our old registration for a moment. A broker that cannot be
# reached (ConnectError: a restart, a move) is retried too, as in Pulsar's
# clients: with send timeout 0 a send waits through it (SEM-7.5).
FATAL_ON_RECONNECT: tuple[type[PulsarException], ...] = (
    AuthenticationError,
    AuthorizationError,
    IncompatibleSchema,
    NotAllowedError,
    ProducerFenced,
    TopicNotFound,
    TopicTerminated,
)


class State(enum.Enum):
    PENDING = "pending"
    READY = "ready"
    CONNECTING = "connecting"
    CLOSING = "closing"
    CLOSED = "closed"
    FAILED = "failed"


class ConnectionHandler(abc.ABC):
    """Base of Producer and Consumer: owns the connection and the reconnect task."""

    def __init__(self, context: ClientContext, topic: TopicName) -> None:
        self.context = context
        self.topic_name = topic
        # Futures woken by every state change (see wait_connected).
        self._state_waiters: list[asyncio.Future[None]] = []
        self.state = State.PENDING
        self.cnx: ClientConnection | None = None
        self._reconnect_task: asyncio.Task[None] | None = None
        self._backoff = context.new_backoff()
        self.failure: PulsarException | None = None
        self._log = _log.bind(topic=str(topic))

    @abc.abstractmethod
    async def attach(self, cnx: ClientConnection) -> None:
        """Register on `cnx` (PRODUCER / SUBSCRIBE); raise on failure."""

    def on_disconnected(self) -> None:
        """The connection is gone; forget what was tied to it (default: nothing)."""
        return

    def on_fatal(self, error: PulsarException) -> None:
        """Reconnecting hit a non-retriable error: fail whatever waits (default: nothing)."""
        return

    @property
    def state(self) -> State:
        return self._state

    @state.setter
    def state(self, value: State) -> None:
        self._state = value
        waiters, self._state_waiters = self._state_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def is_connected(self) -> bool:
        return self.state is State.READY and self.cnx is not None and not self.cnx.is_closed

    async def wait_connected(self) -> ClientConnection:
        """The connection; while a (re)connection is under way (a seek makes
        the broker close a consumer), waits for it up to the operation timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.context.operation_timeout
        while not self.is_connected():
            if self.state not in (State.PENDING, State.CONNECTING):
                raise ConnectError(f"{self.topic_name} is not connected ({self.state.value})")
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise ConnectError(
                    f"{self.topic_name} did not reconnect within the operation timeout"
                )
            waiter: asyncio.Future[None] = loop.create_future()
            self._state_waiters.append(waiter)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiter, remaining)
        assert self.cnx is not None
        return self.cnx

    async def start(self) -> None:
        """First attach, retried until the operation timeout."""
        deadline = time.monotonic() + self.context.operation_timeout
        last: PulsarException | None = None
        while True:
            if self.state in (State.CLOSING, State.CLOSED):
                raise AlreadyClosed(f"{self.topic_name}: closed while connecting")
            try:
                await self._attach_once()
                return
            except PulsarException as exc:
                last = exc
                if not exc.retriable:
                    self.state = State.FAILED
                    raise
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.state = State.FAILED
                raise Timeout(
                    f"{self.topic_name}: not connected within the operation timeout: {last}"
                ) from last
            await asyncio.sleep(min(self._backoff.next(), remaining))

    async def _attach_once(self) -> None:
        cnx = await self.context.connection_for(self.topic_name)
        await self.attach(cnx)
        self._backoff.reset()

    def connection_closed(self, cnx: ClientConnection) -> None:
        if cnx is not self.cnx:
            return
        self.cnx = None
        if self.state is State.READY:
            self.state = State.CONNECTING
        self.on_disconnected()
        self.schedule_reconnect()

    def schedule_reconnect(self) -> None:
        if self.state not in (State.CONNECTING, State.READY):
            return
        self.state = State.CONNECTING
        if self._reconnect_task is None or self._reconnect_task.done():
            self._reconnect_task = asyncio.get_running_loop().create_task(
                self._reconnect_loop(), name=f"pulsar-reconnect-{self.topic_name}"
            )

    async def _reconnect_loop(self) -> None:
        while self.state is State.CONNECTING:
            await asyncio.sleep(self._backoff.next())
            if self.state is not State.CONNECTING:
                return
            try:
                await self._attach_once()
                self._log.info("reconnected")
                return
            except PulsarException as exc:
                if isinstance(exc, FATAL_ON_RECONNECT):
                    self._log.warning("reconnect failed for good", error=str(exc))
                    self.state = State.FAILED
                    self.failure = exc
                    self.on_fatal(exc)
                    return
                self._log.debug("reconnect failed, retrying", error=str(exc))

    async def stop_reconnecting(self) -> None:
        task, self._reconnect_task = self._reconnect_task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
