"""A persistent topic: one managed ledger, its producers and subscriptions.

The publish path appends the SEND's "headers and payload" bytes unchanged
(DESIGN "hot path"); subscriptions hear about every durable append so tailing
consumers are served from the entry cache right away.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import structlog

from magnetar.broker.compaction.state import TopicCompaction
from magnetar.broker.compaction.view import CompactedView
from magnetar.broker.counters import RateCounter
from magnetar.broker.dispatchers.base import DispatcherSettings
from magnetar.broker.dispatchers.consumer import Consumer, SubType
from magnetar.broker.dispatchers.entries import last_entry_id
from magnetar.broker.endpoint import ClientConnection
from magnetar.broker.errors import (
    BrokerServiceError,
    ConsumerBusyError,
    NotAllowedError,
    SubscriptionNotFoundError,
    TopicTerminatedError,
)
from magnetar.broker.features.dedup import CURSOR_NAME as DEDUP_CURSOR, MessageDeduplication
from magnetar.broker.features.keywindow import (
    CURSOR_NAME as KEY_WINDOW_CURSOR,
    KeyWindowIndex,
    KeyWindowPolicy,
)
from magnetar.broker.features.markers import MarkerHorizon, mark_replicated
from magnetar.broker.features.replicated import is_replication_name
from magnetar.broker.policies.backlog_quota import QuotaState, backlog_bytes
from magnetar.broker.policies.rates import DispatchRate, DispatchRateLimiter
from magnetar.broker.policies.subscribe_rate import SubscribeRate, SubscribeRateLimiter
from magnetar.broker.policies.subscription_rates import SubscriptionDispatchRates
from magnetar.broker.storage.api import (
    EARLIEST,
    LATEST,
    InitialPosition,
    ManagedCursor,
    ManagedLedger,
    Position,
    StorageError,
)
from magnetar.broker.topics.base import SubscribeOptions, Subscription
from magnetar.broker.topics.persistent_subscription import PersistentSubscription
from magnetar.broker.topics.publish_path import Producer, SendRejected
from magnetar.broker.topics.topic_producers import TopicProducers
from magnetar.proto.errors import ServerError
from magnetar.proto.naming import TopicName

log = structlog.get_logger(__name__)

# How long a replicator's PRODUCER waits for its earlier appends to land.
_SETTLE_TIMEOUT_S = 10.0


def _reserved(cursor: str) -> bool:
    """The broker's own cursors: deduplication, key window, replication."""
    return cursor in (DEDUP_CURSOR, KEY_WINDOW_CURSOR) or is_replication_name(cursor)


def ledger_name(topic: TopicName) -> str:
    """The managed ledger's name for a topic (storage's path convention)."""
    return f"{topic.tenant}/{topic.namespace}/{topic.domain}/{topic.local_name}"


class PersistentTopic(TopicProducers):
    def __init__(
        self,
        name: TopicName,
        ledger: ManagedLedger,
        *,
        max_read_batch_size: int = 100,
        key_shared_consistent_hashing: bool = False,
        failover_consistent_hashing: bool = False,
        allow_auto_subscription_creation: bool = True,
        dedup_snapshot_interval: int = 1000,
        dedup_inactivity_seconds: float = 6 * 3600.0,
        compaction_dir: Path | None = None,
    ) -> None:
        super().__init__(str(name), name.partition_index)
        self.topic_name = name
        self.ledger = ledger
        self.subscriptions: dict[str, PersistentSubscription] = {}
        # The dispatchRate quota its subscriptions share; changed in place.
        self.dispatch_rate = DispatchRateLimiter()
        # subscriptionDispatchRate, for subscriptions made later too.
        self._subscription_rates = SubscriptionDispatchRates()
        # Set while a subscribeRate policy applies; ServerCnx asks it first.
        self.subscribe_rate: SubscribeRateLimiter | None = None
        self._max_read_batch_size = max_read_batch_size
        self._key_shared_consistent_hashing = key_shared_consistent_hashing
        self._failover_consistent_hashing = failover_consistent_hashing
        self._allow_auto_subscription_creation = allow_auto_subscription_creation
        self._subscribe_lock = asyncio.Lock()
        self._non_durable_counter = 0
        self._background: set[asyncio.Task[None]] = set()
        self._dedup = MessageDeduplication(
            self.name,
            ledger,
            snapshot_interval=dedup_snapshot_interval,
            inactivity_seconds=dedup_inactivity_seconds,
            connected=self.producers.keys,
        )
        self._dedup_lock = asyncio.Lock()
        self.compaction = TopicCompaction(self.name, ledger, compaction_dir)
        # Where a terminated topic stopped: no entry is ever stored after it.
        self.terminated_at: Position | None = None
        # The namespace's message TTL (0: none); enforced by broker/service/expiry.py.
        self.message_ttl_s = 0
        # The delayedDelivery policy's switch, for dispatchers made later too.
        self._delayed_delivery = True
        # maxUnackedMessagesOnConsumer / OnSubscription (0: none), for
        # dispatchers made later too.
        self._unacked_limits = (0, 0)
        # The namespace's backlog quotas and the last measured backlog age.
        self.quota = QuotaState()
        # Entries (as `messages`) and bytes storage wrote, followed by the stats
        # update from the ledger's own counters (pulsar_storage_write_rate).
        self.storage_writes = RateCounter()
        # Markers stored before this load may be anywhere up to its last entry.
        self.marker_horizon = MarkerHorizon(ledger.last_confirmed_position)
        ledger.set_entries_listener(self._appended)

    def __repr__(self) -> str:
        return f"PersistentTopic({self.name!r})"

    @property
    def is_persistent(self) -> bool:
        return True

    # ------------------------------------------------------------ publishing

    def append(self, data: bytes, num_messages: int) -> asyncio.Future[Position]:
        """Queue an entry; the future resolves once it is durable.

        No task per entry: storage hands back a future, and completion fans out
        through callbacks (subscriptions here, the receipt in the producer).
        """
        if self.terminated_at is not None:
            refused: asyncio.Future[Position] = asyncio.get_running_loop().create_future()
            refused.set_exception(
                SendRejected(ServerError.TopicTerminatedError, f"topic {self.name} is terminated")
            )
            return refused
        published = self.published
        published.messages += num_messages
        published.bytes += len(data)
        try:
            return self.ledger.add_entry(data, num_messages)
        except StorageError as exc:
            failed: asyncio.Future[Position] = asyncio.get_running_loop().create_future()
            failed.set_exception(exc)
            return failed

    def _appended(self, entries: int, nbytes: int) -> None:
        """The ledger stored a group of entries (its listener)."""
        for subscription in self.subscriptions.values():
            subscription.on_new_entries()
        if self.compaction.threshold_bytes:
            self.compaction.note_published(nbytes)

    async def set_deduplication(self, enabled: bool) -> None:
        """Switch deduplication; connected producers see it from their next SEND."""
        if not self._dedup_lock.locked() and enabled == (self.deduplication is not None):
            return  # as it is, and no switch under way (most loads)
        async with self._dedup_lock:
            if enabled and self.deduplication is None:
                await self._enable_dedup("enable deduplication on")
                self.deduplication = self._dedup
            elif not enabled and self.deduplication is not None:
                self.deduplication = None
                # A replicator's ids stay: its resend must still be caught.
                if self.replicated_dedup is None and not self._dedup.has_replicated:
                    await self._dedup.disable()

    async def _enable_dedup(self, purpose: str) -> None:
        """Open the deduplication state (its cursor); a storage failure is
        ServiceNotReady for the client, naming `purpose`."""
        try:
            await self._dedup.enable()
        except StorageError as exc:
            raise BrokerServiceError(
                ServerError.ServiceNotReady, f"cannot {purpose} {self.name}: {exc}"
            ) from exc

    async def accept_replicator(self, name: str) -> None:
        async with self._dedup_lock:
            if self.replicated_dedup is None:
                await self._enable_dedup("take replicated messages on")
                self.replicated_dedup = self._dedup
        # Bounded: an append that fails never settles (then the resends of
        # what it held are refused as in flight, and retried).
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_SETTLE_TIMEOUT_S):
                await self._dedup.settled(name)

    def set_subscribe_rate(self, rate: SubscribeRate | None) -> None:
        """Apply (None: remove) subscribeRate; an unchanged rate keeps its
        limiter, so the current period's counts stand."""
        if rate is None or rate.unlimited:
            self.subscribe_rate = None
        elif self.subscribe_rate is None or self.subscribe_rate.rate != rate:
            self.subscribe_rate = SubscribeRateLimiter(rate)

    def set_dedup_snapshot_interval(self, seconds: int) -> None:
        self._dedup.set_snapshot_interval_seconds(seconds)

    def set_dispatch_rate(self, rate: DispatchRate | None) -> None:
        """Apply the dispatchRate policy to every subscription (one shared quota)."""
        self.dispatch_rate.set_rate(rate)

    def set_subscription_dispatch_rates(self, rates: SubscriptionDispatchRates) -> None:
        """Apply subscriptionDispatchRate: each subscription its own quota."""
        self._subscription_rates = rates
        for name, sub in self.subscriptions.items():
            sub.set_dispatch_rate(rates.of(name))

    async def set_key_window(self, policy: KeyWindowPolicy | None) -> None:
        """Apply the dedupKeyWindow policy; a changed policy reopens the index."""
        if policy is None and self.key_window is None and not self._dedup_lock.locked():
            return  # none, and none being opened (most loads)
        async with self._dedup_lock:
            current = self.key_window
            if current is not None and current.policy == policy:
                return
            self.key_window = None
            if current is not None:
                await current.close(delete=policy is None)
            if policy is None:
                return
            index = KeyWindowIndex(self.name, self.ledger, policy)
            try:
                await index.open()
            except StorageError as exc:
                raise BrokerServiceError(
                    ServerError.ServiceNotReady,
                    f"cannot open the key-window index of {self.name}: {exc}",
                ) from exc
            self.key_window = index

    async def evict_backlog(self, now_s: float) -> None:
        """consumer_backlog_eviction: advance the slowest subscriptions entry
        by entry until the backlog fits the size quota; expire what is older
        than the age quota."""
        size, age = self.quota.quotas.size, self.quota.quotas.age
        if size is not None and not size.blocks_producers:
            while backlog_bytes(self.ledger) > size.limit:
                durable = [
                    c
                    for c in self.ledger.cursors
                    if c.is_durable and c.backlog_entries and not _reserved(c.name)
                ]
                if not durable:
                    break
                slowest = max(durable, key=lambda c: c.backlog_entries)
                sub = await self.get_subscription(slowest.name)
                if sub.skip_entries(max(1, slowest.backlog_entries // 10)) == 0:
                    break
        if age is not None and not age.blocks_producers and self.quota.backlog_age_s > age.limit:
            cutoff_ms = int((now_s - age.limit) * 1000)
            for cursor in [
                c for c in self.ledger.cursors if c.is_durable and not _reserved(c.name)
            ]:
                await (await self.get_subscription(cursor.name)).expire_messages(cutoff_ms)

    def disconnect_producers_over_quota(self) -> int:
        """A blocking quota (producer_request_hold / producer_exception) also
        stops producers already connected, as Pulsar's quota monitor does: they
        are closed, and their reconnection is refused with the policy's error
        until the backlog fits again."""
        if not self.producers:
            return 0
        over = self.quota.over_quota(self.ledger, blocking=True)
        if over is None:
            return 0
        quota, reason = over
        count = len(self.producers)
        log.warning(
            "backlog quota exceeded: disconnecting producers",
            topic=self.name,
            reason=reason,
            policy=quota.policy,
            producers=count,
        )
        self.close_producers(notify_clients=True)
        return count

    # ------------------------------------------------------------ consuming

    async def subscribe(
        self, cnx: ClientConnection, options: SubscribeOptions
    ) -> tuple[Consumer, Subscription]:
        self._check_open()
        if options.read_compacted and options.sub_type not in (SubType.Exclusive, SubType.Failover):
            raise NotAllowedError(
                "read_compacted is only allowed on Exclusive and Failover subscriptions"
            )
        async with self._subscribe_lock:
            self._check_open()
            if options.durable:
                sub = await self._durable_subscription(
                    options.subscription, options.initial_position
                )
                if options.replicate_subscription_state:
                    mark_replicated(sub.cursor)
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
                key_shared=options.key_shared,
            )
            try:
                await sub.add_consumer(consumer)
            except BrokerServiceError:
                if not options.durable:
                    await self._drop_subscription(sub)
                raise
            if self.terminated_at is not None:
                sub.topic_terminated()
            sub.read_compacted(
                self._compacted_view if options.read_compacted else None,
                from_earliest=not options.durable and options.start_position == EARLIEST,
            )
        return consumer, sub

    async def _durable_subscription(
        self, name: str, initial_position: InitialPosition
    ) -> PersistentSubscription:
        if _reserved(name):
            raise NotAllowedError(f"subscription name {name!r} is reserved by the broker")
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
        if existing is not None and existing.awaits_reconnect:
            return existing  # a reader back after a reset cursor resumes there
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
        topic_out = self.dispatched
        sub: PersistentSubscription | None = None

        def on_dispatch(consumer: Consumer, messages: int, size: int, redelivered: int) -> None:
            # Plain additions; the consumer counts its own in send_entries.
            topic_out.messages += messages
            topic_out.bytes += size
            if sub is not None:
                sub.dispatched.messages += messages
                sub.dispatched.bytes += size
                if redelivered:
                    sub.redelivered.messages += redelivered

        def on_active_change(consumer: Consumer, is_active: bool) -> None:
            consumer.cnx.active_consumer_changed(consumer.consumer_id, is_active)

        settings = DispatcherSettings(
            name=f"{self.name}/{name}",
            dispatch_rate=self.dispatch_rate,
            max_read_batch_size=self._max_read_batch_size,
            key_shared_consistent_hashing=self._key_shared_consistent_hashing,
            partition_index=self.partition_index,
            topic_name=self.name,
            failover_consistent_hashing=self._failover_consistent_hashing,
            on_dispatch=on_dispatch,
            on_active_change=on_active_change,
            delayed_delivery=self._delayed_delivery,
            max_unacked_per_consumer=self._unacked_limits[0],
            max_unacked_per_subscription=self._unacked_limits[1],
            markers=self.marker_horizon,
        )
        sub = PersistentSubscription(
            self.name, name, self.ledger, cursor, settings, on_emptied=self._subscription_emptied
        )
        sub.set_dispatch_rate(self._subscription_rates.of(name))
        return sub

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
            self.activity += 1
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

    async def create_subscription(self, name: str, start: Position) -> PersistentSubscription:
        """The admin's subscription create: a durable cursor at `start` (EARLIEST,
        LATEST or a message id); 409 (ResourceExists) semantics are the caller's."""
        self._check_open()
        async with self._subscribe_lock:
            initial = InitialPosition.EARLIEST if start == EARLIEST else InitialPosition.LATEST
            sub = await self._durable_subscription(name, initial)
        if start not in (EARLIEST, LATEST):
            await sub.reset_cursor(start)
        return sub

    @property
    def duplicates(self) -> int:
        """SENDs answered as duplicates since the topic was loaded (SEMANTICS 7)."""
        return self._dedup.duplicates

    def idle_cursors(self) -> list[ManagedCursor]:
        """Durable subscriptions stored but not open (after a restart a
        subscription is a cursor until a consumer or the admin opens it)."""
        return [
            c
            for c in self.ledger.cursors
            if c.is_durable and c.name not in self.subscriptions and not _reserved(c.name)
        ]

    def subscription_names(self) -> list[str]:
        """Open subscriptions and stored durable cursors (after a restart a
        subscription is a cursor until a consumer or the admin opens it)."""
        names = set(self.subscriptions)
        names.update(c.name for c in self.ledger.cursors if c.is_durable)
        return sorted(n for n in names if not _reserved(n))

    async def get_subscription(self, name: str) -> PersistentSubscription:
        """An open subscription, opening a stored durable one; 404 otherwise."""
        sub = self.subscriptions.get(name)
        if sub is not None:
            return sub
        if _reserved(name) or self.ledger.get_cursor(name) is None:
            raise SubscriptionNotFoundError(f"subscription {name!r} does not exist on {self.name}")
        async with self._subscribe_lock:
            return await self._durable_subscription(name, InitialPosition.LATEST)

    async def delete_subscription(self, name: str) -> None:
        """The admin's subscription delete: refused while consumers are attached."""
        sub = await self.get_subscription(name)
        if sub.consumers:
            raise ConsumerBusyError(
                f"subscription {name!r} has {len(sub.consumers)} connected consumer(s)"
            )
        del self.subscriptions[name]
        await sub.close()
        if sub.is_durable:
            await self.ledger.delete_cursor(sub.cursor.name)

    # ------------------------------------------------------------ termination

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
        if self.terminated_at is not None:
            raise TopicTerminatedError(self.name)
        if name not in self.producers:
            self.quota.check_producer(self.ledger, self.name)
        return super().add_producer(
            cnx,
            producer_id,
            name,
            access_mode=access_mode,
            user_provided_name=user_provided_name,
            epoch=epoch,
        )

    def terminate(self, last: Position | None = None) -> Position:
        """Stop publishing after `last` (also on load of a terminated topic)."""
        if self.terminated_at is not None:
            return self.terminated_at
        self.terminated_at = last if last is not None else self.ledger.last_confirmed_position
        self.close_producers(notify_clients=True)
        for sub in self.subscriptions.values():
            sub.topic_terminated()
        return self.terminated_at

    def set_compaction_threshold(self, threshold_bytes: int) -> None:
        self.compaction.threshold_bytes = threshold_bytes

    def set_delayed_delivery(self, active: bool) -> None:
        self._delayed_delivery = active
        for sub in self.subscriptions.values():
            sub.set_delayed_delivery(active)

    def set_unacked_limits(self, per_consumer: int, per_subscription: int) -> None:
        if (per_consumer, per_subscription) == self._unacked_limits:
            return  # applied on every policy change: unchanged, nothing to redo
        self._unacked_limits = (per_consumer, per_subscription)
        for sub in self.subscriptions.values():
            sub.set_unacked_limits(per_consumer, per_subscription)

    def set_auto_subscription_creation(self, allowed: bool) -> None:
        self._allow_auto_subscription_creation = allowed

    def _compacted_view(self) -> CompactedView | None:
        return self.compaction.view

    async def last_message_id(self) -> tuple[Position, int]:
        """The newest entry's position and its last batch index (-1: not a batch)."""
        return await last_entry_id(self.ledger)

    # ------------------------------------------------------------- lifecycle

    async def close(self, *, notify_clients: bool = True) -> None:
        """Close producers and consumers (telling their clients), persist cursors,
        close the ledger. Idempotent."""
        if self.is_closed:
            return
        self.is_closed = True
        self.close_producers(notify_clients=notify_clients)
        await self.compaction.close()
        self._dedup.close()
        if self.key_window is not None:
            await self.key_window.close()
        for sub in list(self.subscriptions.values()):
            await sub.close(notify_clients=notify_clients)
        self.subscriptions.clear()
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        try:
            await self.ledger.close()
        except StorageError as exc:
            log.warning("closing ledger failed", topic=self.name, error=str(exc))
