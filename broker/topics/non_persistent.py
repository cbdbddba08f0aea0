"""A non-persistent topic: dispatch or drop, no storage, no backlog.

Each published entry goes at once to one consumer of every subscription (by
the subscription's type); a subscription with no consumer able to take it
(no permits, or a full socket) drops it and counts the drop, as Pulsar's
non-persistent topics do. Message ids are unique: the "ledger" id is the
load time of the topic in ms and entry ids count up from 0 (WIRE 8).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

import structlog

from magnetar.broker.counters import RateCounter
from magnetar.broker.dispatchers.base import DispatcherSettings
from magnetar.broker.dispatchers.consumer import Consumer, sub_type_name
from magnetar.broker.dispatchers.factory import new_non_persistent_dispatcher
from magnetar.broker.dispatchers.non_persistent import NonPersistentDispatcher
from magnetar.broker.endpoint import ClientConnection
from magnetar.broker.errors import ConsumerBusyError, NotAllowedError
from magnetar.broker.features.keywindow import KeyWindowPolicy
from magnetar.broker.policies.rates import DispatchRate
from magnetar.broker.policies.subscribe_rate import SubscribeRate, SubscribeRateLimiter
from magnetar.broker.policies.subscription_rates import SubscriptionDispatchRates
from magnetar.broker.storage.api import Entry, Position
from magnetar.broker.topics.base import (
    LastMessageId,
    SubscribeOptions,
    Subscription,
    SubscriptionStats,
)
from magnetar.broker.topics.topic_producers import TopicProducers
from magnetar.proto.naming import TopicName

log = structlog.get_logger(__name__)

_NO_POSITION = Position(-1, -1)


def _active_consumer_changed(consumer: Consumer, is_active: bool) -> None:
    consumer.cnx.active_consumer_changed(consumer.consumer_id, is_active)


class NonPersistentSubscription:
    def __init__(
        self,
        topic_name: str,
        name: str,
        settings: DispatcherSettings,
        on_emptied: Callable[[NonPersistentSubscription], None],
        topic_dispatched: RateCounter | None = None,
    ) -> None:
        self.topic_name = topic_name
        self.name = name
        self.sub_type: int | None = None
        self.dropped_messages = 0
        # As a persistent subscription's (nothing is ever redelivered here).
        self.dispatched = RateCounter()
        self.redelivered = RateCounter()
        self._topic_dispatched = topic_dispatched
        self._settings = settings
        # Built for the type of the first consumer (dispatchers/non_persistent.py).
        self._dispatcher: NonPersistentDispatcher | None = None
        self._on_emptied = on_emptied
        self.is_closed = False
        # Consumers gone (service/inactivity.py's idle time).
        self.activity = 0

    @property
    def is_durable(self) -> bool:
        return False

    @property
    def consumers(self) -> list[Consumer]:
        return self._dispatcher.consumers if self._dispatcher is not None else []

    # ------------------------------------------------------------ consumers

    def add_consumer(self, consumer: Consumer) -> None:
        dispatcher = self._dispatcher
        if dispatcher is not None and dispatcher.consumers:
            if consumer.sub_type != self.sub_type:
                raise ConsumerBusyError(
                    f"subscription {self.name!r} is {sub_type_name(self.sub_type or 0)}; "
                    f"cannot attach a {sub_type_name(consumer.sub_type)} consumer"
                )
        else:
            # Nothing carries over from consumers gone: the newcomer's type rules.
            dispatcher = new_non_persistent_dispatcher(consumer.sub_type, self._settings)
        dispatcher.add_consumer(consumer)  # refused: nothing changed
        self._dispatcher = dispatcher
        self.sub_type = consumer.sub_type

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer.is_closed:
            return
        consumer.is_closed = True
        self.activity += 1
        if self._dispatcher is not None:
            self._dispatcher.remove_consumer(consumer)
        if not self.consumers:
            self._on_emptied(self)

    def disconnect_consumers(self) -> None:
        for consumer in list(self.consumers):
            self.remove_consumer(consumer)
            consumer.cnx.consumer_closed_by_broker(consumer.consumer_id)

    # ------------------------------------------------------------- dispatch

    def dispatch(self, entry: Entry) -> None:
        """Send the entry to one consumer now, or drop it."""
        dispatcher = self._dispatcher
        if dispatcher is None or not dispatcher.dispatch(entry):
            self.dropped_messages += entry.num_messages
            return
        # One entry went to one consumer: all its messages were sent.
        sent = entry.num_messages
        size = len(entry.data)
        self.dispatched.messages += sent
        self.dispatched.bytes += size
        if self._topic_dispatched is not None:
            self._topic_dispatched.messages += sent
            self._topic_dispatched.bytes += size

    def consumer_flow(self, consumer: Consumer, permits: int) -> None:
        consumer.flow(permits)

    def consumers_writable(self) -> None:
        """Nothing is queued here: a drained socket changes nothing."""

    # ----------------------------------------------------------------- acks

    def acknowledge_individual(
        self,
        consumer: Consumer,
        positions: Sequence[Position],
        ack_sets: Sequence[list[int] | None],
    ) -> None:
        consumer.remove_pending(positions)

    def acknowledge_cumulative(
        self, consumer: Consumer, position: Position, ack_set: list[int] | None = None
    ) -> None:
        consumer.remove_pending_up_to(position)

    def redeliver(self, consumer: Consumer, positions: Sequence[Position] | None) -> None:
        """Nothing is stored, so nothing can be delivered again."""
        if positions is None:
            consumer.take_pending()
        else:
            consumer.remove_pending(positions)

    async def reset_cursor(self, target: Position) -> None:
        """There is no cursor; consumers reconnect and receive new messages."""
        self.disconnect_consumers()

    async def reset_cursor_to_time(self, timestamp_ms: int) -> None:
        self.disconnect_consumers()

    async def last_message_id(self) -> LastMessageId:
        return LastMessageId(_NO_POSITION, -1, _NO_POSITION)

    @property
    def unacked_messages(self) -> int:
        return sum(c.unacked_messages for c in self.consumers)

    @property
    def delayed_messages(self) -> int:
        return 0  # dispatch or drop: nothing is held

    @property
    def delayed_total(self) -> int:
        return 0

    def stats(self) -> SubscriptionStats:
        return SubscriptionStats(
            name=self.name,
            type_name=sub_type_name(self.sub_type) if self.sub_type is not None else "",
            msg_backlog=0,
            is_durable=False,
            consumers=len(self.consumers),
            msg_dropped=self.dropped_messages,
        )

    async def close(self, *, notify_clients: bool = False) -> None:
        if self.is_closed:
            return
        if notify_clients:
            self.disconnect_consumers()
        else:
            for consumer in list(self.consumers):
                self.remove_consumer(consumer)
        self.is_closed = True


class NonPersistentTopic(TopicProducers):
    def __init__(self, name: TopicName, *, failover_consistent_hashing: bool = False) -> None:
        super().__init__(str(name), name.partition_index)
        self.topic_name = name
        self._failover_consistent_hashing = failover_consistent_hashing
        self.subscriptions: dict[str, NonPersistentSubscription] = {}
        # Unique ids across reloads: the load time stands in for a ledger id.
        self._ledger_id = time.time_ns() // 1_000_000
        self._next_entry = 0
        self._last = _NO_POSITION

    def __repr__(self) -> str:
        return f"NonPersistentTopic({self.name!r})"

    @property
    def is_persistent(self) -> bool:
        return False

    def append(self, data: bytes, num_messages: int) -> asyncio.Future[Position]:
        position = Position(self._ledger_id, self._next_entry)
        self._next_entry += 1
        self._last = position
        published = self.published
        published.messages += num_messages
        published.bytes += len(data)
        entry = Entry(position, data, num_messages)
        for subscription in self.subscriptions.values():
            subscription.dispatch(entry)
        done: asyncio.Future[Position] = asyncio.get_running_loop().create_future()
        done.set_result(position)
        return done

    async def accept_replicator(self, name: str) -> None:
        """Nothing is stored: no sequence ids to keep."""

    async def set_deduplication(self, enabled: bool) -> None:
        """Nothing is stored, so there is nothing to deduplicate (as in Pulsar)."""

    def set_dispatch_rate(self, rate: DispatchRate | None) -> None:
        """Dispatch-or-drop: nothing waits to be dispatched later."""

    def set_subscription_dispatch_rates(self, rates: SubscriptionDispatchRates) -> None:
        """Dispatch-or-drop, as for dispatchRate."""

    async def set_key_window(self, policy: KeyWindowPolicy | None) -> None:
        """Nothing is stored: no first copy to point at."""

    @property
    def subscribe_rate(self) -> SubscribeRateLimiter | None:
        return None

    def set_subscribe_rate(self, rate: SubscribeRate | None) -> None:
        """Pulsar limits subscribes on persistent topics only."""

    def set_dedup_snapshot_interval(self, seconds: int) -> None:
        """Nothing is stored, so no deduplication to snapshot."""

    async def subscribe(
        self, cnx: ClientConnection, options: SubscribeOptions
    ) -> tuple[Consumer, Subscription]:
        self._check_open()
        if options.read_compacted:
            # Pulsar's answer: nothing is kept, so there is nothing compacted.
            raise NotAllowedError("readCompacted only valid on persistent topics")
        sub = self.subscriptions.get(options.subscription)
        if sub is None:
            settings = DispatcherSettings(
                # The subscription's own name, as the errors it raises say it.
                name=options.subscription,
                partition_index=self.partition_index,
                topic_name=self.name,
                failover_consistent_hashing=self._failover_consistent_hashing,
                on_active_change=_active_consumer_changed,
            )
            sub = NonPersistentSubscription(
                self.name, options.subscription, settings, self._emptied, self.dispatched
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
        sub.add_consumer(consumer)
        self.subscriptions[sub.name] = sub
        return consumer, sub

    def _emptied(self, sub: NonPersistentSubscription) -> None:
        if self.subscriptions.get(sub.name) is sub:
            del self.subscriptions[sub.name]
            self.activity += 1

    async def unsubscribe(self, subscription: Subscription, consumer: Consumer) -> None:
        others = [c for c in subscription.consumers if c is not consumer]
        if others:
            raise ConsumerBusyError(
                f"subscription {subscription.name!r} has {len(others)} other connected consumer(s)"
            )
        subscription.remove_consumer(consumer)

    async def last_message_id(self) -> tuple[Position, int]:
        return self._last, -1

    def set_compaction_threshold(self, threshold_bytes: int) -> None:
        pass  # nothing is stored, nothing compacts

    def set_delayed_delivery(self, active: bool) -> None:
        pass  # non-persistent dispatchers hold nothing back

    def set_unacked_limits(self, per_consumer: int, per_subscription: int) -> None:
        pass  # as in Pulsar, only persistent subscriptions count unacked messages

    def set_auto_subscription_creation(self, allowed: bool) -> None:
        pass  # its subscriptions exist only while they have consumers

    def terminate(self, last: Position | None = None) -> Position:
        raise NotAllowedError(f"only persistent topics can be terminated: {self.name}")

    async def close(self, *, notify_clients: bool = True) -> None:
        if self.is_closed:
            return
        self.is_closed = True
        self.close_producers(notify_clients=notify_clients)
        for sub in list(self.subscriptions.values()):
            await sub.close(notify_clients=notify_clients)
        self.subscriptions.clear()
