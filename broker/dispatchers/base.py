"""The dispatch loop shared by every persistent dispatcher.

One task per subscription owns the cursor's reads. It sleeps until something
can change the outcome (FLOW, a new consumer, a redelivery, new entries, a
socket draining) and then runs rounds while they make progress. A round
serves, in order: entries read earlier that did not fit, positions queued for
redelivery, then new entries from the cursor, reading only as many entries as
the permits could take (SEM-2.5). Subclasses choose which consumer gets an
entry.

Unacked limits (Pulsar's maxUnackedMessagesPerConsumer / PerSubscription,
Shared and Key_Shared only, 0: none): a consumer at its limit is blocked (it
gets nothing, and no more than its limit's room in one round), and so is the
whole subscription at its limit; each resumes when acks or redeliveries bring
its count to half the limit. Consumers keep their unacked counts as they go,
so a check is a comparison, never a scan of pending messages.
"""

from __future__ import annotations

import asyncio
import contextlib
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import structlog

from magnetar.broker.compaction.view import CompactedView
from magnetar.broker.dispatchers.consumer import Consumer
from magnetar.broker.dispatchers.entries import deliver_at_time
from magnetar.broker.dispatchers.redelivery import RedeliveryTracker, ReplayQueue
from magnetar.broker.features.delayed import DelayedDeliveryTracker
from magnetar.broker.features.markers import MarkerHorizon, has_marker_tag, marker_type
from magnetar.broker.policies.rates import DispatchRateLimiter
from magnetar.broker.storage.api import (
    EARLIEST,
    CursorClosed,
    Entry,
    ManagedCursor,
    ManagedLedger,
    ManagedLedgerClosed,
    Position,
    StorageError,
)

log = structlog.get_logger(__name__)

# (consumer, messages, bytes, messages among them dispatched again)
DispatchListener = Callable[[Consumer, int, int, int], None]
ActiveChangeListener = Callable[[Consumer, bool], None]


@dataclass(frozen=True, slots=True)
class DispatcherSettings:
    """What every dispatcher of one subscription is built with."""

    name: str = ""
    max_read_batch_size: int = 100
    # The topic's dispatchRate quota, shared by its subscriptions (None: none).
    dispatch_rate: DispatchRateLimiter | None = None
    # The subscription's own quota (subscriptionDispatchRate), applied with
    # the topic's: the smaller allowance wins, both are charged.
    subscription_dispatch_rate: DispatchRateLimiter | None = None
    # The topic's partition (-1: not a partition) and its full name; Failover
    # elects by them (SEM-4.2).
    partition_index: int = -1
    topic_name: str = ""
    # Failover elects on the hash ring for partitions too (the broker option
    # active_consumer_failover_consistent_hashing).
    failover_consistent_hashing: bool = False
    on_dispatch: DispatchListener | None = None
    on_active_change: ActiveChangeListener | None = None
    # SEMANTICS 8.1: hold entries until their deliver_at_time (dispatchers
    # whose type honours it: Shared, Key_Shared).
    delayed_delivery: bool = True
    # Key_Shared AUTO_SPLIT by consistent hashing instead of range splitting
    # (SEM-4.4.2; the broker option subscription_key_shared_use_consistent_hashing).
    key_shared_consistent_hashing: bool = False
    # Key_Shared: entries held back because their key's consumer cannot take
    # them yet, at most; reading stops there, which bounds how far the other
    # keys run ahead of a stuck consumer.
    key_shared_look_ahead: int = 5000
    # A read_compacted consumer reads the topic's current compacted view (None:
    # the raw topic); from earliest, its first read starts at the view's
    # beginning (a reader from earliest: the raw entries may be trimmed, the
    # view is not).
    compacted_view: Callable[[], CompactedView | None] | None = None
    compacted_from_earliest: bool = False
    # The topic is terminated: called whenever the cursor is at the end.
    on_end_of_topic: Callable[[], None] | None = None
    # maxUnackedMessagesPerConsumer / PerSubscription (0: none), applied by
    # the dispatchers whose type honours them (Shared, Key_Shared).
    max_unacked_per_consumer: int = 0
    max_unacked_per_subscription: int = 0
    # How far the topic's entries may hold markers (issue 45.4); shared with
    # the topic, which moves it. The default: anywhere.
    markers: MarkerHorizon = field(default_factory=MarkerHorizon)


class PersistentDispatcher(ABC):
    # Whether this delivery pattern holds delayed messages (SEMANTICS 8.1).
    supports_delayed_delivery = False
    # Whether it applies the unacked limits (Pulsar: Shared and Key_Shared).
    supports_unacked_limits = False

    def __init__(
        self, ledger: ManagedLedger, cursor: ManagedCursor, settings: DispatcherSettings
    ) -> None:
        self.ledger = ledger
        self.cursor = cursor
        self.name = settings.name
        self.max_read_batch_size = settings.max_read_batch_size
        self.consumers: list[Consumer] = []
        self.redelivery = RedeliveryTracker()
        self.replay = ReplayQueue()
        # Entries read from the cursor that no consumer could take yet.
        self._buffer: deque[Entry] = deque()
        # Bumped by every rewind: reads that started before it are stale.
        self._read_epoch = 0
        # A flag and a bare future rather than an asyncio.Event: the loop waits
        # here after every round (once per group commit per topic), and the
        # Event's loop check and waiter deque cost more than the wake itself.
        self._woken = False
        self._waiter: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._on_dispatch = settings.on_dispatch
        self.delayed: DelayedDeliveryTracker | None = (
            DelayedDeliveryTracker()
            if settings.delayed_delivery and self.supports_delayed_delivery
            else None
        )
        self._delayed_timer: asyncio.TimerHandle | None = None
        self._delayed_due_at = 0
        self._dispatch_rate = settings.dispatch_rate
        self._subscription_rate = settings.subscription_dispatch_rate
        self._rate_timer: asyncio.TimerHandle | None = None
        self._compacted_view = settings.compacted_view
        self._compacted_from_earliest = settings.compacted_from_earliest
        self._on_end_of_topic = settings.on_end_of_topic
        self._markers = settings.markers
        limits = self.supports_unacked_limits
        self.max_unacked_per_consumer = settings.max_unacked_per_consumer if limits else 0
        self.max_unacked_per_subscription = settings.max_unacked_per_subscription if limits else 0
        # blockedDispatcherOnUnackedMsgs: the subscription is at its limit.
        self.blocked_on_unacked = False
        # Some consumer may be blocked: acks then look for ones to resume.
        self._consumers_blocked = False
        # Messages this round may still send under the subscription's limit
        # (None: no limit); set by _round, spent by _dispatch.
        self._room: int | None = None

    # ------------------------------------------------------------ consumers

    @abstractmethod
    def add_consumer(self, consumer: Consumer) -> None:
        """Attach a consumer; raises BrokerServiceError when it is refused."""

    @abstractmethod
    def remove_consumer(self, consumer: Consumer) -> None:
        """Detach a consumer and hand its unacked messages back (SEM-3.8)."""

    def redeliver(self, consumer: Consumer, positions: Sequence[Position] | None) -> None:
        """REDELIVER_UNACKNOWLEDGED_MESSAGES, with or without ids (SEM-3.7): the
        consumer's pending entries (or those named) are replayed. Exclusive and
        Failover rewind instead (single_active overrides this)."""
        if positions is None:
            handed_back = consumer.take_pending()
        else:
            handed_back = consumer.remove_pending(positions)
        self._give_back(handed_back)

    def _give_back(self, positions: list[Position]) -> None:
        """Entries a consumer will not ack (it left, or asked for redelivery):
        replay them, skipping any acked meanwhile."""
        if not positions:
            return
        if self._consumers_blocked or self.blocked_on_unacked:
            self._unacked_dropped()
        self.requeue(positions)
        self.replay.add_all(p for p in positions if not self.cursor.is_deleted(p))
        self.wake()

    @abstractmethod
    def _consumers_with_permits(self) -> int:
        """Permits the dispatcher may use now (0: nothing to do)."""

    @abstractmethod
    def _dispatch(self, entries: deque[Entry]) -> int:
        """Hand entries from the left of `entries` to consumers, in order, while
        they fit; leave the rest. Returns how many entries were dispatched."""

    # ------------------------------------------------------------- events

    def wake(self) -> None:
        """Something changed that may let dispatch progress."""
        if not self._closed:
            self._woken = True
            waiter = self._waiter
            if waiter is not None:
                self._waiter = None
                if not waiter.done():
                    waiter.set_result(None)
            if self._task is None:
                self._task = asyncio.get_running_loop().create_task(
                    self._run(), name=f"dispatcher {self.name}"
                )

    def consumer_flow(self, consumer: Consumer, permits: int) -> None:
        consumer.flow(permits)
        self.wake()

    def on_new_entries(self) -> None:
        if self.consumers:
            self.wake()

    def on_ack(self, positions: Sequence[Position]) -> None:
        for position in positions:
            self.redelivery.remove(position)
            self.replay.discard(position)
        if self._consumers_blocked or self.blocked_on_unacked:
            self._unacked_dropped()

    def on_cumulative_ack(self, position: Position) -> None:
        self.redelivery.remove_up_to(position)
        self.replay.discard_up_to(position)
        if self._consumers_blocked or self.blocked_on_unacked:
            self._unacked_dropped()

    def rewind(self) -> None:
        """Forget read-ahead and restart reading after mark-delete (SEM-5.3)."""
        self._buffer.clear()
        self.replay.clear()
        self._read_epoch += 1
        with contextlib.suppress(CursorClosed, ManagedLedgerClosed):
            self.cursor.rewind()
        self.wake()

    def cursor_reset(self) -> None:
        """The cursor was moved (seek, reset cursor): nothing read or queued
        for redelivery before it may go out now."""
        self._buffer.clear()
        self.replay.clear()
        self.redelivery.clear()
        if self.delayed is not None:
            self.delayed.clear()  # re-read from the new position, held again
        self._read_epoch += 1
        self.wake()

    def read_compacted(
        self, view: Callable[[], CompactedView | None] | None, *, from_earliest: bool
    ) -> None:
        """Serve `view` (None: the raw topic) from the next read on. A method as
        well as a setting: each SUBSCRIBE says whether its consumer reads
        compacted, once the consumer is attached to a running dispatcher."""
        self._compacted_view = view
        self._compacted_from_earliest = from_earliest

    def topic_terminated(self, on_end_of_topic: Callable[[], None]) -> None:
        """Call `on_end_of_topic` whenever the cursor is at the end. A method as
        well as a setting: a topic is terminated while its dispatchers run."""
        self._on_end_of_topic = on_end_of_topic

    def requeue(self, positions: Sequence[Position]) -> None:
        """Positions that will be dispatched again count one more redelivery."""
        for position in positions:
            if not self.cursor.is_deleted(position):
                self.redelivery.increment(position)

    async def close(self) -> None:
        """Stop the loop; idempotent. Consumers are closed by the subscription."""
        self._closed = True
        for timer in (self._delayed_timer, self._rate_timer):
            if timer is not None:
                timer.cancel()
        self._delayed_timer = self._rate_timer = None
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._buffer.clear()

    # ---------------------------------------------------------- the loop

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while not self._closed:
                self._woken = False
                if not await self._round() and not self._woken:
                    self._waiter = waiter = loop.create_future()
                    await waiter
        except (CursorClosed, ManagedLedgerClosed):
            log.debug("dispatcher stopped: storage closed", subscription=self.name)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("dispatcher failed", subscription=self.name)
        finally:
            self._waiter = None
            if self._task is asyncio.current_task():
                self._task = None

    async def _round(self) -> bool:
        permits = self._within_dispatch_rate(self._within_unacked(self._consumers_with_permits()))
        if permits <= 0:
            return False
        if self._buffer:
            return self._dispatch(self._buffer) > 0
        limit = min(permits, self.max_read_batch_size)
        if self.delayed is not None and self.delayed:
            # Due delayed messages go before new ones (SEMANTICS 8.1).
            self.replay.add_all(self.delayed.pop_due(limit))
            self._schedule_delayed()
        if self.replay:
            positions = [p for p in self.replay.take(limit) if not self.cursor.is_deleted(p)]
            if not positions:
                return True
            epoch = self._read_epoch
            entries = await self.ledger.read_positions(positions)
            if epoch != self._read_epoch:
                return True
            return self._dispatch_read(entries, replayed=True)
        compacted = self._read_compacted(limit)
        if compacted:
            return self._dispatch_read(compacted, replayed=False)
        if not self.cursor.has_more_entries():
            if self._on_end_of_topic is not None:
                self._on_end_of_topic()
            return False
        epoch = self._read_epoch
        entries = await self.cursor.read_entries(limit)
        if epoch != self._read_epoch or not entries:
            return bool(entries)
        # Caught up with nothing held back, the next round would only find
        # that out again (its permit and rate checks, once per group commit
        # per topic): wait for the next wake instead.
        return self._dispatch_read(entries, replayed=False) and not self._caught_up()

    def _caught_up(self) -> bool:
        return (
            not self._buffer
            and not self.replay
            and not self.delayed  # None or empty
            and self._compacted_view is None
            and self._on_end_of_topic is None
            and not self.cursor.has_more_entries()
        )

    def _read_compacted(self, limit: int) -> list[Entry]:
        """Up to the compaction horizon a read_compacted consumer reads the
        compacted view; past it (or with nothing left there) the raw topic."""
        if self._compacted_view is None:
            return []
        view = self._compacted_view()
        start = self.cursor.read_position
        if self._compacted_from_earliest:
            self._compacted_from_earliest = False
            start = EARLIEST
        if view is None or start > view.horizon:
            return []
        entries = view.read(start, limit)
        after = entries[-1].position if len(entries) == limit else view.horizon
        self.cursor.seek(self.ledger.next_position(after))
        return entries

    def _dispatch_read(self, entries: list[Entry], *, replayed: bool) -> bool:
        if not entries:
            return True
        # Reads are in position order: one comparison spares the per-entry
        # scan where no marker can be.
        if entries[0].position <= self._markers.last:
            entries = self._drop_markers(entries)
            if not entries:
                return True  # only markers: read on
        if replayed:
            queue = deque(e for e in entries if not self.cursor.is_deleted(e.position))
        elif self.delayed is not None:
            queue = deque(e for e in entries if not self._hold_if_delayed(e))
            if not queue:
                return True  # all held: read on
        else:
            queue = deque(entries)
        dispatched = self._dispatch(queue)
        if queue:
            if replayed:
                self.replay.add_all(e.position for e in queue)
            else:
                self._buffer.extend(queue)
        # Nothing taken: wait for FLOW or a drained socket rather than spin.
        return dispatched > 0 or not queue

    def _drop_markers(self, entries: list[Entry]) -> list[Entry]:
        """Marker entries (replicated subscriptions, issue 45.4) are for the
        brokers: acknowledged here, never sent to a consumer or reader."""
        markers = [e.position for e in entries if has_marker_tag(e.data) and marker_type(e.data)]
        if not markers:
            return entries
        with contextlib.suppress(StorageError):
            self.cursor.delete(markers)
        dropped = set(markers)
        return [e for e in entries if e.position not in dropped]

    # ----------------------------------------------------- delayed delivery

    def set_delayed_delivery(self, enabled: bool) -> None:
        """The delayedDelivery policy changed: switched off, what is held
        goes out now, as if it had no delay (Pulsar delivers it at once)."""
        if not self.supports_delayed_delivery or enabled == (self.delayed is not None):
            return
        if enabled:
            self.delayed = DelayedDeliveryTracker()
            return
        assert self.delayed is not None
        held, self.delayed = self.delayed.pop_all(), None
        if self._delayed_timer is not None:
            self._delayed_timer.cancel()
            self._delayed_timer = None
        self.replay.add_all(held)
        self.wake()

    def _hold_if_delayed(self, entry: Entry) -> bool:
        assert self.delayed is not None
        deliver_at = deliver_at_time(entry.data)
        if not deliver_at or not self.delayed.add(entry.position, deliver_at):
            return False
        if self._delayed_timer is None or deliver_at < self._delayed_due_at:
            self._set_delayed_timer(deliver_at)
        return True

    def _schedule_delayed(self) -> None:
        """One timer, at the earliest due time held."""
        assert self.delayed is not None
        due = self.delayed.next_due_ms()
        if due is None:
            if self._delayed_timer is not None:
                self._delayed_timer.cancel()
                self._delayed_timer = None
            return
        self._set_delayed_timer(due)

    def _set_delayed_timer(self, due_ms: int) -> None:
        assert self.delayed is not None
        if self._delayed_timer is not None:
            self._delayed_timer.cancel()
            self._delayed_timer = None
        if self._closed:
            return
        self._delayed_due_at = due_ms
        delay = max(due_ms - self.delayed.clock(), 0) / 1000
        self._delayed_timer = asyncio.get_running_loop().call_later(delay, self._delayed_due)

    def _delayed_due(self) -> None:
        self._delayed_timer = None
        self.wake()

    # ------------------------------------------------------ unacked limits

    def set_unacked_limits(self, per_consumer: int, per_subscription: int) -> None:
        """The maxUnackedMessages policies changed (0: none): blocks follow the
        new limits at once."""
        if not self.supports_unacked_limits:
            return
        self.max_unacked_per_consumer = per_consumer
        self.max_unacked_per_subscription = per_subscription
        if not per_subscription:
            self.blocked_on_unacked = False
        blocked = False
        for consumer in self.consumers:
            consumer.max_unacked = per_consumer
            if not per_consumer:
                consumer.blocked = False
            elif consumer.unacked >= per_consumer:
                consumer.blocked = True
            elif consumer.unacked <= per_consumer // 2:
                consumer.blocked = False
            blocked = blocked or consumer.blocked
        self._consumers_blocked = blocked
        self.wake()

    def _limit_consumer(self, consumer: Consumer) -> None:
        """A consumer joins: it runs under the per-consumer limit."""
        consumer.max_unacked = self.max_unacked_per_consumer
        consumer.blocked = False

    def _within_unacked(self, permits: int) -> int:
        """`permits` capped by the subscription's unacked limit; blocks the
        subscription at it. Also sets the round's room for _dispatch."""
        limit = self.max_unacked_per_subscription
        if not limit:
            self._room = None
            return permits
        total = sum(c.unacked for c in self.consumers)
        if total >= limit:
            self.blocked_on_unacked = True
        elif self.blocked_on_unacked and total * 2 < limit:
            self.blocked_on_unacked = False
        room = 0 if self.blocked_on_unacked else limit - total
        self._room = room
        return min(permits, room)

    def _unacked_dropped(self) -> None:
        """Acks or a redelivery lowered unacked counts: a blocked consumer
        resumes at half its limit, a blocked subscription below half of its
        (Pulsar's two rules)."""
        resumed = False
        if self._consumers_blocked:
            still = False
            for consumer in self.consumers:
                if consumer.blocked:
                    if consumer.unacked <= consumer.max_unacked // 2:
                        consumer.blocked = False
                        resumed = True
                    else:
                        still = True
            self._consumers_blocked = still
        if self.blocked_on_unacked:
            total = sum(c.unacked for c in self.consumers)
            if total * 2 < self.max_unacked_per_subscription:
                self.blocked_on_unacked = False
                resumed = True
        if resumed:
            self.wake()

    def _within_dispatch_rate(self, permits: int) -> int:
        """`permits` capped by the topic's dispatchRate quota and the
        subscription's own; 0 when either is spent, with a wake-up armed for
        when its period ends."""
        permits = self._within_rate(self._dispatch_rate, permits)
        own = self._subscription_rate
        if own is None or own.rate is None:  # the common case: no own quota
            return permits
        return self._within_rate(own, permits)

    def _within_rate(self, rate: DispatchRateLimiter | None, permits: int) -> int:
        if rate is None or permits <= 0:
            return permits
        allowed = rate.allowance()
        if allowed is None:
            return permits
        if allowed == 0 and self._rate_timer is None and not self._closed:
            # One timer whichever quota is spent: the round it wakes checks both.
            self._rate_timer = asyncio.get_running_loop().call_later(
                rate.wait(), self._rate_period_ended
            )
        return min(permits, allowed)

    def _rate_period_ended(self) -> None:
        self._rate_timer = None
        self.wake()

    # ----------------------------------------------------------- helpers

    def _send(self, consumer: Consumer, entries: list[Entry]) -> None:
        sent = consumer.send_entries(entries, self.redelivery.get, self._ack_set)
        limit = consumer.max_unacked
        if limit and consumer.unacked >= limit:
            consumer.blocked = self._consumers_blocked = True
        rate, own, on_dispatch = self._dispatch_rate, self._subscription_rate, self._on_dispatch
        if rate is None and own is None and on_dispatch is None:
            return
        size = sum(len(e.data) for e in entries)
        if rate is not None:
            rate.consume(sent, size)
        if own is not None and own.rate is not None:
            own.consume(sent, size)
        if on_dispatch is not None:
            again = self.redelivery
            redelivered = (
                sum(e.num_messages for e in entries if again.get(e.position)) if again else 0
            )
            on_dispatch(consumer, sent, size, redelivered)

    def _ack_set(self, position: Position) -> list[int] | None:
        return self.cursor.get_batch_ack_set(position)
