"""A persistent topic: one managed ledger, its producers and subscriptions.

The publish path appends the SEND's "headers and payload" bytes unchanged
(DESIGN "hot path"); subscriptions hear about every durable append so tailing
consumers are served from the entry cache right away.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable
from functools import partial

import structlog

from magnetar.broker.consumer import Consumer
from magnetar.broker.dispatchers.base import DispatcherSettings
from magnetar.broker.endpoint import ClientConnection
from magnetar.broker.entries import last_entry_id
from magnetar.broker.errors import (
    BrokerServiceError,
    ConsumerBusyError,
    NotAllowedError,
    ProducerBusyError,
    ProducerFencedError,
    ServiceNotReadyError,
    SubscriptionNotFoundError,
)
from magnetar.broker.metrics import BrokerMetrics
from magnetar.broker.producer import AccessMode, Producer
from magnetar.broker.storage.api import (
    EARLIEST,
    LATEST,
    InitialPosition,
    ManagedCursor,
    ManagedLedger,
    Position,
    StorageError,
)
from magnetar.broker.subscription import PersistentSubscription
from magnetar.broker.topics.base import SubscribeOptions, Subscription
from magnetar.proto.errors import ServerError
from magnetar.proto.naming import TopicName

log = structlog.get_logger(__name__)


def ledger_name(topic: TopicName) -> str:
    """The managed ledger's name for a topic (storage's path convention)."""
    return f"{topic.tenant}/{topic.namespace}/{topic.domain}/{topic.local_name}"


class PersistentTopic:
    def __init__(
        self,
        name: TopicName,
        ledger: ManagedLedger,
        *,
        metrics: BrokerMetrics | None = None,
        max_read_batch_size: int = 100,
        allow_auto_subscription_creation: bool = True,
    ) -> None:
        self.topic_name = name
        self.name = str(name)
        self.partition_index = name.partition_index
        self.ledger = ledger
        self.metrics = metrics
        self.producers: dict[str, Producer] = {}
        self.subscriptions: dict[str, PersistentSubscription] = {}
        self._max_read_batch_size = max_read_batch_size
        self._allow_auto_subscription_creation = allow_auto_subscription_creation
        self._subscribe_lock = asyncio.Lock()
        self._non_durable_counter = 0
        self._background: set[asyncio.Task[None]] = set()
        # WaitForExclusive producers queued for the topic, in arrival order.
        self._exclusive_waiters: deque[asyncio.Future[None]] = deque()
        self.is_closed = False

    def __repr__(self) -> str:
        return f"PersistentTopic({self.name!r})"

    # ------------------------------------------------------------ publishing

    def append(self, data: bytes, num_messages: int) -> asyncio.Future[Position]:
        """Queue an entry; the future resolves once it is durable.

        No task per entry: storage hands back a future, and completion fans out
        through callbacks (subscriptions here, the receipt in the producer).
        """
        metrics = self.metrics
        if metrics is not None:
            metrics.messages_in.inc(num_messages)
            metrics.bytes_in.inc(len(data))
        try:
            future = asyncio.ensure_future(self.ledger.add_entry(data, num_messages))
        except StorageError as exc:
            failed: asyncio.Future[Position] = asyncio.get_running_loop().create_future()
            failed.set_exception(exc)
            return failed
        future.add_done_callback(partial(self._appended, time.perf_counter()))
        return future

    def _appended(self, started: float, future: asyncio.Future[Position]) -> None:
        if future.cancelled() or future.exception() is not None:
            return
        if self.metrics is not None:
            self.metrics.entries_in.inc()
            self.metrics.publish_latency.observe(time.perf_counter() - started)
        for subscription in self.subscriptions.values():
            subscription.on_new_entries()

    def add_producer(
        self,
        cnx: ClientConnection,
        producer_id: int,
        name: str,
        *,
        access_mode: int,
        user_provided_name: bool,
        epoch: int = 0,
    ) -> Producer:
        self._check_open()
        existing = self.producers.get(name)
        if existing is not None:
            if existing.cnx is cnx and existing.producer_id == producer_id:
                return existing  # the client retried its PRODUCER request
            raise ProducerBusyError(
                f"producer with name {name!r} is already connected to topic {self.name}"
            )
        self._check_access_mode(access_mode)
        producer = Producer(
            self,
            producer_id,
            name,
            cnx,
            access_mode=access_mode,
            user_provided_name=user_provided_name,
            epoch=epoch,
        )
        self.producers[name] = producer
        return producer

    async def wait_for_exclusive_access(self, on_queued: Callable[[], None]) -> None:
        """WaitForExclusive (WIRE 6): return once no other producer holds the topic.

        Waiters are served in arrival order; `on_queued` runs once when the
        caller has to wait (the broker then answers producer_ready = false).
        """
        self._check_open()
        if not self.producers and not self._exclusive_waiters:
            return
        on_queued()
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._exclusive_waiters.append(waiter)
        try:
            await waiter
        finally:
            if waiter in self._exclusive_waiters:
                self._exclusive_waiters.remove(waiter)
            if waiter.cancelled() and not self.producers:
                self._wake_exclusive_waiter()  # pass the turn on

    def _wake_exclusive_waiter(self) -> None:
        while self._exclusive_waiters:
            waiter = self._exclusive_waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _check_access_mode(self, mode: int) -> None:
        exclusive = [p for p in self.producers.values() if p.access_mode != AccessMode.Shared]
        if mode == AccessMode.Shared:
            if exclusive:
                raise ProducerFencedError(
                    f"topic {self.name} has an exclusive producer {exclusive[0].name!r}"
                )
        elif mode in (AccessMode.Exclusive, AccessMode.WaitForExclusive):
            if self.producers:
                raise ProducerFencedError(
                    f"topic {self.name} already has producers; an exclusive one is refused"
                )
        elif mode == AccessMode.ExclusiveWithFencing:
            # WIRE 7: the new producer takes over; the old ones are closed.
            for producer in list(self.producers.values()):
                self.remove_producer(producer)
                producer.cnx.producer_closed_by_broker(producer.producer_id)
        else:
            raise NotAllowedError(f"producer access mode {mode} is not supported yet")

    def remove_producer(self, producer: Producer) -> None:
        if self.producers.get(producer.name) is producer:
            del self.producers[producer.name]
            if not self.producers:
                self._wake_exclusive_waiter()
        producer.close()

    # ------------------------------------------------------------ consuming

    async def subscribe(
        self, cnx: ClientConnection, options: SubscribeOptions
    ) -> tuple[Consumer, Subscription]:
        self._check_open()
        async with self._subscribe_lock:
            self._check_open()
            if options.durable:
                sub = await self._durable_subscription(
                    options.subscription, options.initial_position
                )
            else:
                sub = self._non_durable_subscription(
                    options.subscription,
                    options.start_position or LATEST,
                    options.start_inclusive,
                )
            consumer = Consumer(
                sub.name,
                options.consumer_id,
                options.consumer_name,
                options.sub_type,
                cnx,
                priority_level=options.priority_level,
                partition_index=self.partition_index,
                epoch=options.epoch,
            )
            try:
                await sub.add_consumer(consumer)
            except BrokerServiceError:
                if not options.durable:
                    await self._drop_subscription(sub)
                raise
        return consumer, sub

    async def _durable_subscription(
        self, name: str, initial_position: InitialPosition
    ) -> PersistentSubscription:
        sub = self.subscriptions.get(name)
        if sub is not None:
            return sub
        if not self._allow_auto_subscription_creation and self.ledger.get_cursor(name) is None:
            raise SubscriptionNotFoundError(
                f"subscription {name!r} does not exist on {self.name} and automatic "
                "subscription creation is disabled"
            )
        try:
            cursor = await self.ledger.open_cursor(name, initial_position)
        except StorageError as exc:
            raise BrokerServiceError(
                ServerError.ServiceNotReady, f"cannot open subscription {name!r}: {exc}"
            ) from exc
        sub = self._new_subscription(name, cursor)
        self.subscriptions[name] = sub
        return sub

    def _non_durable_subscription(
        self, name: str, start: Position, inclusive: bool
    ) -> PersistentSubscription:
        existing = self.subscriptions.get(name)
        if existing is not None and (existing.consumers or existing.is_durable):
            raise ConsumerBusyError(f"subscription {name!r} on {self.name} is in use")
        self._non_durable_counter += 1
        if start == EARLIEST:
            inclusive = True
        cursor = self.ledger.new_non_durable_cursor(
            start, inclusive=inclusive, name=f"{name}-nd-{self._non_durable_counter}"
        )
        sub = self._new_subscription(name, cursor)
        self.subscriptions[name] = sub
        return sub

    def _new_subscription(self, name: str, cursor: ManagedCursor) -> PersistentSubscription:
        metrics = self.metrics

        def on_dispatch(consumer: Consumer, messages: int, size: int, redelivered: bool) -> None:
            if metrics is not None:
                metrics.messages_out.inc(messages)
                metrics.bytes_out.inc(size)
                if redelivered:
                    metrics.redelivered.inc()

        def on_active_change(consumer: Consumer, is_active: bool) -> None:
            consumer.cnx.active_consumer_changed(consumer.consumer_id, is_active)

        settings = DispatcherSettings(
            name=f"{self.name}/{name}",
            max_read_batch_size=self._max_read_batch_size,
            partition_index=self.partition_index,
            on_dispatch=on_dispatch,
            on_active_change=on_active_change,
        )
        return PersistentSubscription(
            self.name, name, self.ledger, cursor, settings, on_emptied=self._subscription_emptied
        )

    def _subscription_emptied(self, sub: PersistentSubscription) -> None:
        # A reader's subscription lives only as long as its consumer.
        if self.subscriptions.get(sub.name) is sub:
            del self.subscriptions[sub.name]
        task = asyncio.get_running_loop().create_task(self._drop_subscription(sub))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _drop_subscription(self, sub: PersistentSubscription) -> None:
        if self.subscriptions.get(sub.name) is sub:
            del self.subscriptions[sub.name]
        await sub.close()
        if not sub.is_durable:
            with contextlib.suppress(StorageError):
                await self.ledger.delete_cursor(sub.cursor.name)

    async def unsubscribe(self, subscription: Subscription, consumer: Consumer) -> None:
        sub = self.subscriptions.get(subscription.name)
        if sub is None or sub is not subscription:
            raise SubscriptionNotFoundError(
                f"subscription {subscription.name!r} is not open on {self.name}"
            )
        others = [c for c in sub.consumers if c is not consumer]
        if others:
            raise ConsumerBusyError(
                f"subscription {sub.name!r} has {len(others)} other connected consumer(s)"
            )
        sub.remove_consumer(consumer)
        if self.subscriptions.get(sub.name) is sub:
            del self.subscriptions[sub.name]
        await sub.close()
        try:
            await self.ledger.delete_cursor(sub.cursor.name)
        except StorageError as exc:
            raise BrokerServiceError(
                ServerError.ServiceNotReady, f"cannot delete subscription {sub.name!r}: {exc}"
            ) from exc

    # ---------------------------------------------------------------- queries

    async def last_message_id(self) -> tuple[Position, int]:
        """The newest entry's position and its last batch index (-1: not a batch)."""
        return await last_entry_id(self.ledger)

    # ------------------------------------------------------------- lifecycle

    def _check_open(self) -> None:
        if self.is_closed:
            raise ServiceNotReadyError(f"topic {self.name} is closing")

    async def close(self, *, notify_clients: bool = True) -> None:
        """Close producers and consumers (telling their clients), persist cursors,
        close the ledger. Idempotent."""
        if self.is_closed:
            return
        self.is_closed = True
        while self._exclusive_waiters:
            waiter = self._exclusive_waiters.popleft()
            if not waiter.done():
                waiter.set_exception(ServiceNotReadyError(f"topic {self.name} is closing"))
        for producer in list(self.producers.values()):
            self.remove_producer(producer)
            if notify_clients:
                producer.cnx.producer_closed_by_broker(producer.producer_id)
        for sub in list(self.subscriptions.values()):
            await sub.close(notify_clients=notify_clients)
        self.subscriptions.clear()
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        try:
            await self.ledger.close()
        except StorageError as exc:
            log.warning("closing ledger failed", topic=self.name, error=str(exc))
