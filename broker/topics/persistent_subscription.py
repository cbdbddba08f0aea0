"""A persistent subscription: one cursor, one dispatcher, its consumers.

Everything a subscription does lives here once, for the wire and the admin
API alike: acks (SEM-3.1 individual, SEM-3.2 cumulative, batch-index acks),
redelivery, reset cursor by id or publish time, last message id, stats. The
cursor moves mark-delete and persists it (SEM-3.9). The dispatcher is built
for the subscription type of the first consumer; a consumer of another type
is refused while consumers are attached.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import replace

import structlog

from magnetar.broker.compaction.view import CompactedView
from magnetar.broker.counters import RateCounter
from magnetar.broker.dispatchers.base import DispatcherSettings, PersistentDispatcher
from magnetar.broker.dispatchers.consumer import Consumer, SubType, sub_type_name
from magnetar.broker.dispatchers.entries import last_entry_id, publish_time
from magnetar.broker.dispatchers.factory import new_dispatcher
from magnetar.broker.errors import (
    BrokerServiceError,
    ConsumerBusyError,
    NotAllowedError,
)
from magnetar.broker.policies.rates import DispatchRate, DispatchRateLimiter
from magnetar.broker.storage.api import (
    EARLIEST,
    Entry,
    InvalidPosition,
    ManagedCursor,
    ManagedLedger,
    Position,
    StorageError,
)
from magnetar.broker.topics.base import LastMessageId, SubscriptionStats
from magnetar.proto.errors import ServerError

log = structlog.get_logger(__name__)

RECONNECT_GRACE_SECONDS = 60.0


class PersistentSubscription:
    def __init__(
        self,
        topic_name: str,
        name: str,
        ledger: ManagedLedger,
        cursor: ManagedCursor,
        settings: DispatcherSettings,
        *,
        on_emptied: Callable[[PersistentSubscription], None] | None = None,
    ) -> None:
        self.topic_name = topic_name
        self.name = name
        self.ledger = ledger
        self.cursor = cursor
        self.sub_type: int | None = None
        self._dispatcher: PersistentDispatcher | None = None
        # Its own dispatch quota (subscriptionDispatchRate), changed in place:
        # every dispatcher it gets holds this one.
        self.dispatch_rate = DispatchRateLimiter()
        self._settings = replace(settings, subscription_dispatch_rate=self.dispatch_rate)
        # Called when the last consumer of a non-durable subscription leaves:
        # a reader's subscription lives only as long as its consumer.
        self._on_emptied = on_emptied
        # While a reset cursor disconnects a reader, its subscription stays for
        # the reconnect (the reader resumes from the reset position, as in
        # Pulsar); dropped if nobody comes back within the grace period.
        self._keep_for_reconnect = False
        self._reconnect_grace: asyncio.TimerHandle | None = None
        self.is_closed = False
        # The topic's compacted view while the consumer reads compacted.
        self._compacted_view: Callable[[], CompactedView | None] | None = None
        self._compacted_from_earliest = False
        # The topic is terminated: consumers at its end are told (once each).
        self._terminated = False
        self._told_end: set[int] = set()
        # Counted per dispatch (the topic adds its own; rates by stats_update.py).
        self.dispatched = RateCounter()
        self.redelivered = RateCounter()
        # Consumers gone (service/inactivity.py's idle time).
        self.activity = 0

    def __repr__(self) -> str:
        return f"PersistentSubscription({self.topic_name!r}, {self.name!r})"

    @property
    def is_durable(self) -> bool:
        return self.cursor.is_durable

    @property
    def consumers(self) -> list[Consumer]:
        return self._dispatcher.consumers if self._dispatcher is not None else []

    # ------------------------------------------------------------ consumers

    async def add_consumer(self, consumer: Consumer) -> None:
        if self.is_closed:
            raise BrokerServiceError(
                ServerError.ServiceNotReady, f"subscription {self.name!r} is closing"
            )
        dispatcher = self._dispatcher
        if self._keep_for_reconnect:
            # The reader came back: from here on it lives as long as its consumer.
            self._keep_for_reconnect = False
            if self._reconnect_grace is not None:
                self._reconnect_grace.cancel()
                self._reconnect_grace = None
        if dispatcher is not None and dispatcher.consumers:
            if consumer.sub_type != self.sub_type:
                raise ConsumerBusyError(
                    f"subscription {self.name!r} is {sub_type_name(self.sub_type or 0)}; "
                    f"cannot attach a {sub_type_name(consumer.sub_type)} consumer"
                )
        elif dispatcher is None or consumer.sub_type != self.sub_type:
            dispatcher = await self._replace_dispatcher(consumer.sub_type)
        dispatcher.add_consumer(consumer)
        self.cursor.set_active()

    def set_delayed_delivery(self, active: bool) -> None:
        """The topic's delayedDelivery switch, for this dispatcher and the next."""
        self._settings = replace(self._settings, delayed_delivery=active)
        if self._dispatcher is not None:
            self._dispatcher.set_delayed_delivery(active)

    def set_dispatch_rate(self, rate: DispatchRate | None) -> None:
        """Its subscriptionDispatchRate (None: none); an unchanged rate keeps
        the current period's counts."""
        self.dispatch_rate.set_rate(rate)

    def set_unacked_limits(self, per_consumer: int, per_subscription: int) -> None:
        """The topic's maxUnackedMessages limits (0: none), for this
        dispatcher and the next."""
        self._settings = replace(
            self._settings,
            max_unacked_per_consumer=per_consumer,
            max_unacked_per_subscription=per_subscription,
        )
        if self._dispatcher is not None:
            self._dispatcher.set_unacked_limits(per_consumer, per_subscription)

    @property
    def blocked_on_unacked(self) -> bool:
        """The subscription is at its unacked limit (blockedSubscriptionOnUnackedMsgs)."""
        return self._dispatcher is not None and self._dispatcher.blocked_on_unacked

    async def _replace_dispatcher(self, sub_type: int) -> PersistentDispatcher:
        # Built complete: what this subscription reads and whether its topic
        # is terminated go in with the settings.
        settings = replace(
            self._settings,
            compacted_view=self._compacted_view,
            compacted_from_earliest=self._compacted_from_earliest,
            on_end_of_topic=self._reached_end if self._terminated else None,
        )
        dispatcher = new_dispatcher(sub_type, self.ledger, self.cursor, settings)
        old = self._dispatcher
        if old is not None:
            # No consumer is attached to it any more: a new type may take over.
            self._dispatcher = None
            await old.close()
        self._dispatcher = dispatcher
        self.sub_type = sub_type
        if old is not None:
            # The old dispatcher may have read ahead of unacked messages.
            dispatcher.rewind()
        return dispatcher

    def remove_consumer(self, consumer: Consumer) -> None:
        """Detach a consumer; its unacked messages go back to the others (SEM-3.8)."""
        if consumer.is_closed:
            return
        consumer.is_closed = True
        self.activity += 1
        if self._dispatcher is not None:
            self._dispatcher.remove_consumer(consumer)
        if not self.consumers:
            self.cursor.set_inactive()
        if (
            not self.consumers
            and not self.is_durable
            and not self._keep_for_reconnect
            and self._on_emptied is not None
        ):
            self._on_emptied(self)

    def disconnect_consumers(self) -> None:
        """Close every consumer and tell its client (it resubscribes)."""
        for consumer in list(self.consumers):
            self.remove_consumer(consumer)
            consumer.cnx.consumer_closed_by_broker(consumer.consumer_id)

    # ------------------------------------------------------------ dispatch

    def consumer_flow(self, consumer: Consumer, permits: int) -> None:
        if self._dispatcher is not None:
            self._dispatcher.consumer_flow(consumer, permits)

    def consumers_writable(self) -> None:
        """A connection's socket drained: dispatch may progress again."""
        if self._dispatcher is not None:
            self._dispatcher.wake()

    def on_new_entries(self) -> None:
        if self._dispatcher is not None:
            self._dispatcher.on_new_entries()

    def redeliver(self, consumer: Consumer, positions: Sequence[Position] | None) -> None:
        if self._dispatcher is not None:
            self._dispatcher.redeliver(consumer, positions)

    # ----------------------------------------------------------------- acks

    def acknowledge_individual(
        self,
        consumer: Consumer,
        positions: Sequence[Position],
        ack_sets: Sequence[list[int] | None],
    ) -> None:
        whole: list[Position] = []
        cursor = self.cursor
        for position, ack_set in zip(positions, ack_sets, strict=True):
            if ack_set:
                cursor.delete_batch_indexes(position, ack_set)
                if cursor.is_deleted(position):
                    whole.append(position)
            else:
                whole.append(position)
        if not whole:
            return
        try:
            cursor.delete(whole)
        except InvalidPosition as exc:
            raise BrokerServiceError(ServerError.UnknownError, f"invalid ack: {exc}") from exc
        missing = consumer.remove_pending(whole)
        dispatcher = self._dispatcher
        if len(missing) != len(whole) and dispatcher is not None:
            # Acked by a consumer that did not receive them last (after a
            # redelivery): clear them from whoever holds them.
            found = set(missing)
            rest = [p for p in whole if p not in found]
            for other in dispatcher.consumers:
                if other is not consumer:
                    other.remove_pending(rest)
        if dispatcher is not None:
            dispatcher.on_ack(whole)

    def acknowledge_cumulative(
        self, consumer: Consumer, position: Position, ack_set: list[int] | None = None
    ) -> None:
        """Ack everything up to `position`; with an ack_set, that entry is a
        batch acked only up to some index: the entry before it is the line."""
        if self.sub_type in (SubType.Shared, SubType.Key_Shared):
            raise NotAllowedError(
                f"cumulative ack is not allowed on {sub_type_name(self.sub_type or 0)} "
                f"subscription {self.name!r} (SEM-3.2); ack messages individually"
            )
        try:
            if ack_set:
                self.cursor.delete_batch_indexes(position, ack_set)
                position = self.ledger.previous_position(position)
            self.cursor.mark_delete(position)
        except InvalidPosition as exc:
            raise BrokerServiceError(
                ServerError.UnknownError, f"invalid cumulative ack: {exc}"
            ) from exc
        consumer.remove_pending_up_to(position)
        if self._dispatcher is not None:
            self._dispatcher.on_cumulative_ack(position)

    # ------------------------------------------------------ reset cursor

    async def reset_cursor(self, target: Position) -> None:
        """Move the cursor to `target` (next delivery starts there; acks at and
        after it are cleared). WIRE 12: consumers are closed first, they
        resubscribe."""
        if target.ledger_id < 0:
            target = EARLIEST
        if not self.is_durable:
            self._keep_for_reconnect = True
        self.disconnect_consumers()
        await self.cursor.reset_cursor(target)
        if self._dispatcher is not None:
            self._dispatcher.cursor_reset()
        log.info("subscription reset", topic=self.topic_name, subscription=self.name)
        if self._keep_for_reconnect and self._reconnect_grace is None:
            self._reconnect_grace = asyncio.get_running_loop().call_later(
                RECONNECT_GRACE_SECONDS, self._reconnect_grace_over
            )

    def _reconnect_grace_over(self) -> None:
        self._reconnect_grace = None
        self._keep_for_reconnect = False
        if not self.consumers and not self.is_closed and self._on_emptied is not None:
            self._on_emptied(self)

    @property
    def awaits_reconnect(self) -> bool:
        """A reader's subscription kept through a reset cursor, still unclaimed."""
        return self._keep_for_reconnect and not self.consumers

    async def reset_cursor_to_time(self, timestamp_ms: int) -> None:
        """Reset to the first entry published at or after `timestamp_ms`."""

        def published_before(entry: Entry) -> bool:
            return publish_time(entry) < timestamp_ms

        newest = await self.cursor.find_newest_matching(published_before, from_first_entry=True)
        ledger = self.ledger
        await self.reset_cursor(
            ledger.first_position if newest is None else ledger.next_position(newest)
        )

    # ------------------------------------------- skip / clear / expire

    def _move_mark_delete(self, position: Position) -> None:
        """Acknowledge everything up to `position` on the subscription's behalf
        (admin skip, clear backlog, expiry), as a cumulative ack would."""
        if position <= self.cursor.mark_delete_position:
            return
        self.cursor.mark_delete(position)
        for consumer in self.consumers:
            consumer.remove_pending_up_to(position)
        if self._dispatcher is not None:
            self._dispatcher.on_cumulative_ack(position)

    def acknowledge_up_to(self, position: Position) -> None:
        """A cumulative ack on the subscription's behalf, at most up to the
        last entry (a replicated subscription's update, issue 45.4)."""
        self._move_mark_delete(min(position, self.ledger.last_confirmed_position))

    def clear_backlog(self) -> None:
        self._move_mark_delete(self.ledger.last_confirmed_position)

    def skip_entries(self, count: int) -> int:
        """Acknowledge the next `count` unacknowledged entries; how many were."""
        cursor, ledger = self.cursor, self.ledger
        position, last = cursor.mark_delete_position, ledger.last_confirmed_position
        skipped = 0
        while skipped < count and position < last:
            position = ledger.next_position(position)
            if not cursor.is_deleted(position):
                skipped += 1
        self._move_mark_delete(position)
        return skipped

    async def expire_messages(self, published_before_ms: int) -> None:
        """Acknowledge every entry published before `published_before_ms`
        (message TTL and the admin's expire-messages)."""

        def published_before(entry: Entry) -> bool:
            return publish_time(entry) < published_before_ms

        newest = await self.cursor.find_newest_matching(published_before)
        if newest is not None:
            self._move_mark_delete(newest)

    # ------------------------------------------------------------- queries

    def topic_terminated(self) -> None:
        """No entry will follow the last one: tell consumers once they reach it."""
        self._terminated = True
        if self._dispatcher is not None:
            self._dispatcher.topic_terminated(self._reached_end)
            if not self.cursor.has_more_entries():
                self._reached_end()

    def _reached_end(self) -> None:
        for consumer in self.consumers:
            if consumer.consumer_id not in self._told_end:
                self._told_end.add(consumer.consumer_id)
                consumer.cnx.reached_end_of_topic(consumer.consumer_id)

    def read_compacted(
        self, view: Callable[[], CompactedView | None] | None, *, from_earliest: bool = False
    ) -> None:
        """Serve the compacted view (None: the raw topic) to this subscription;
        `from_earliest`: a reader starting at earliest reads all of the view."""
        self._compacted_view = view
        self._compacted_from_earliest = from_earliest and view is not None
        if self._dispatcher is not None:
            self._dispatcher.read_compacted(view, from_earliest=self._compacted_from_earliest)

    async def last_message_id(self) -> LastMessageId:
        last, batch_index = await last_entry_id(self.ledger)
        if last.entry_id < 0:
            # No entry in the current ledger: Pulsar answers (-1, -1), not
            # the ledger's id with entry -1.
            last = Position(-1, -1)
        view = self._compacted_view() if self._compacted_view is not None else None
        if view is not None and last <= view.horizon:
            # Compacted away up to the end: the last message this reader can get.
            kept = view.entries[-1] if view.entries else None
            last = kept.position if kept is not None else Position(-1, -1)
            batch_index = -1 if kept is None or kept.num_messages == 1 else kept.num_messages - 1
        return LastMessageId(last, batch_index, self.cursor.mark_delete_position)

    @property
    def unacked_messages(self) -> int:
        return sum(c.unacked for c in self.consumers)

    @property
    def delayed_messages(self) -> int:
        """Entries held until their deliver time (SEMANTICS 8.1)."""
        delayed = self._dispatcher.delayed if self._dispatcher is not None else None
        return len(delayed) if delayed is not None else 0

    @property
    def delayed_total(self) -> int:
        """Entries ever held for a later deliver time by the current dispatcher."""
        delayed = self._dispatcher.delayed if self._dispatcher is not None else None
        return delayed.held_total if delayed is not None else 0

    def stats(self) -> SubscriptionStats:
        return SubscriptionStats(
            name=self.name,
            type_name=sub_type_name(self.sub_type) if self.sub_type is not None else "",
            msg_backlog=self.cursor.backlog_messages,
            is_durable=self.is_durable,
            consumers=len(self.consumers),
        )

    # ------------------------------------------------------------ lifecycle

    async def close(self, *, notify_clients: bool = False) -> None:
        """Detach consumers (telling their clients when asked), stop the
        dispatcher and flush the cursor. Idempotent."""
        if self.is_closed:
            return
        if self._reconnect_grace is not None:
            self._reconnect_grace.cancel()
            self._reconnect_grace = None
        if notify_clients:
            self.disconnect_consumers()
        else:
            for consumer in list(self.consumers):
                self.remove_consumer(consumer)
        self.is_closed = True
        if self._dispatcher is not None:
            await self._dispatcher.close()
        try:
            await self.cursor.flush()
        except StorageError as exc:
            log.warning("cursor flush failed", subscription=self.name, error=str(exc))
