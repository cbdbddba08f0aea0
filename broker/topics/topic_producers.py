"""The producer side every topic kind shares: access modes (WIRE 6, 7), the
WaitForExclusive queue, and closing producers."""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from magnetar.broker.counters import RateCounter
from magnetar.broker.dispatchers.entries import deliver_at_time
from magnetar.broker.endpoint import ClientConnection
from magnetar.broker.errors import (
    NotAllowedError,
    ProducerBusyError,
    ProducerFencedError,
    ServiceNotReadyError,
)
from magnetar.broker.features.dedup import MessageDeduplication
from magnetar.broker.features.keywindow import KeyWindowIndex, KeyWindowPolicy
from magnetar.broker.features.markers import MarkerHorizon
from magnetar.broker.features.replicated import is_replication_name
from magnetar.broker.policies.rates import PublishRate, PublishRateLimiter
from magnetar.broker.storage.api import Position
from magnetar.broker.topics.publish_path import AccessMode, MarkerListener, Producer


@dataclass(frozen=True, slots=True)
class PublishLimits:
    """Per-topic limits on what one SEND may carry: the maxMessageSize and
    delayedDelivery policies (0: no limit)."""

    max_message_size: int = 0
    max_delivery_delay_ms: int = 0

    def refusal(self, data: bytes, now_ms: int) -> str | None:
        """Why the entry may not be stored here, or None."""
        if self.max_message_size and len(data) > self.max_message_size:
            return (
                f"a message of {len(data)} bytes exceeds the topic's maxMessageSize "
                f"of {self.max_message_size} bytes"
            )
        if self.max_delivery_delay_ms:
            deliver_at = deliver_at_time(data)
            if deliver_at and deliver_at - now_ms > self.max_delivery_delay_ms:
                return (
                    f"a delivery delay of {deliver_at - now_ms} ms exceeds the topic's "
                    f"maxDeliveryDelayInMillis of {self.max_delivery_delay_ms}"
                )
        return None


class TopicProducers(ABC):
    def __init__(self, name: str, partition_index: int) -> None:
        self.name = name
        self.partition_index = partition_index
        self.producers: dict[str, Producer] = {}
        # Set while deduplication is on (persistent topics only).
        self.deduplication: MessageDeduplication | None = None
        # Set once a remote cluster's replicator may publish (persistent
        # topics only): its sequence ids are always deduplicated.
        self.replicated_dedup: MessageDeduplication | None = None
        # Told of replicated marker entries (persistent topics with
        # replicators only, set by the replication layer; issue 45.4).
        self.marker_listener: MarkerListener | None = None
        # How far entries may be markers (a persistent topic's dispatchers
        # look up to it); anywhere unless the topic knows better.
        self.marker_horizon = MarkerHorizon()
        # Set while a dedupKeyWindow policy applies (persistent topics only).
        self.key_window: KeyWindowIndex | None = None
        # Set while a publishRate policy limits the topic.
        self.publish_rate: PublishRateLimiter | None = None
        # Set while a maxMessageSize or maximum delivery delay applies.
        self.publish_limits: PublishLimits | None = None
        # WaitForExclusive producers queued for the topic, in arrival order.
        self._exclusive_waiters: deque[asyncio.Future[None]] = deque()
        self.is_closed = False
        # Plain totals on the publish and dispatch paths; rates come from the
        # periodic stats update, exports from the metrics collector.
        self.published = RateCounter()
        self.dispatched = RateCounter()
        # Producers and subscriptions gone (service/inactivity.py's idle time).
        self.activity = 0

    @abstractmethod
    def append(self, data: bytes, num_messages: int) -> asyncio.Future[Position]:
        """Store (or dispatch) one entry; the future resolves with its position."""

    def _check_open(self) -> None:
        if self.is_closed:
            raise ServiceNotReadyError(f"topic {self.name} is closing")

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
        # Pulsar's refusal texts (clients show them; some match on them).
        holder = next(
            (p.name for p in self.producers.values() if p.access_mode != AccessMode.Shared), None
        )
        held_by = f"Topic has an existing exclusive producer: {holder}"
        if mode == AccessMode.Shared:
            # Pulsar: ProducerBusy for a shared producer, ProducerFenced
            # only for an exclusive one that cannot have the topic.
            if holder is not None:
                raise ProducerBusyError(held_by)
        elif mode in (AccessMode.Exclusive, AccessMode.WaitForExclusive):
            if holder is not None:
                raise ProducerFencedError(held_by)
            if self.producers:
                raise ProducerFencedError("Topic has existing shared producers")
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
            self.activity += 1
            if not self.producers:
                self._wake_exclusive_waiter()
        producer.close()

    def last_sequence_id(self, producer_name: str) -> int:
        """PRODUCER_SUCCESS.last_sequence_id: the last persisted one with
        deduplication on, else -1 (WIRE 6)."""
        dedup = self.replicated_dedup if is_replication_name(producer_name) else self.deduplication
        return -1 if dedup is None else dedup.last_sequence_id(producer_name)

    @abstractmethod
    async def accept_replicator(self, name: str) -> None:
        """Get ready for a remote cluster's replicator (its sequence ids are
        deduplicated whatever the policy); no-op where nothing is stored."""

    @abstractmethod
    async def set_deduplication(self, enabled: bool) -> None:
        """Turn deduplication on or off; topics that cannot have it ignore it."""

    @abstractmethod
    async def set_key_window(self, policy: KeyWindowPolicy | None) -> None:
        """Apply (or with None, remove) key-window deduplication."""

    def set_publish_limits(self, limits: PublishLimits) -> None:
        self.publish_limits = limits if limits != PublishLimits() else None

    def set_publish_rate(self, rate: PublishRate | None) -> None:
        """Apply (or with None, remove) a publishRate policy; an unchanged
        rate keeps its limiter, so the current second's count stands."""
        if rate is None or rate.unlimited:
            self.publish_rate = None
        elif self.publish_rate is None or self.publish_rate.rate != rate:
            self.publish_rate = PublishRateLimiter(rate)

    def close_producers(self, *, notify_clients: bool) -> None:
        """Fail the WaitForExclusive queue and detach every producer."""
        while self._exclusive_waiters:
            waiter = self._exclusive_waiters.popleft()
            if not waiter.done():
                waiter.set_exception(ServiceNotReadyError(f"topic {self.name} is closing"))
        for producer in list(self.producers.values()):
            self.remove_producer(producer)
            if notify_clients:
                producer.cnx.producer_closed_by_broker(producer.producer_id)
