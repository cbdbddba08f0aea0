"""Single-active-consumer dispatch: Exclusive and Failover (SEM-4.1, SEM-4.2).

One consumer receives everything, in order. Exclusive refuses a second
consumer with ConsumerBusy. Failover keeps the others on standby: on a
non-partitioned topic the owner of the topic's point on a hash ring of the
highest-priority consumers is active; on a partition i the one at index
(i mod n) of the highest-priority consumers sorted by name (failover.py).
When the active consumer changes, reading rewinds to the first unacked
message (SEM-5.3) and consumers hear ACTIVE_CONSUMER_CHANGE.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from magnetar.broker.dispatchers.base import DispatcherSettings, PersistentDispatcher
from magnetar.broker.dispatchers.consumer import Consumer
from magnetar.broker.dispatchers.failover import choose_active
from magnetar.broker.errors import ConsumerBusyError
from magnetar.broker.storage.api import Entry, ManagedCursor, ManagedLedger, Position


class SingleActiveDispatcher(PersistentDispatcher):
    def __init__(
        self,
        ledger: ManagedLedger,
        cursor: ManagedCursor,
        settings: DispatcherSettings,
        *,
        exclusive: bool,
    ) -> None:
        super().__init__(ledger, cursor, settings)
        self.exclusive = exclusive
        self.partition_index = settings.partition_index
        self.topic_name = settings.topic_name
        self.consistent_hashing = settings.failover_consistent_hashing
        self.active_change_listener = settings.on_active_change
        self.active: Consumer | None = None

    def add_consumer(self, consumer: Consumer) -> None:
        if self.exclusive and self.consumers:
            raise ConsumerBusyError(
                f"Exclusive subscription {self.name!r} already has consumer "
                f"{self.consumers[0].name!r}"
            )
        self.consumers.append(consumer)
        self._elect(new_consumer=consumer)

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer not in self.consumers:
            return
        self.consumers.remove(consumer)
        self.requeue(consumer.take_pending())
        if consumer is self.active:
            self.active = None
        self._elect()

    def redeliver(self, consumer: Consumer, positions: Sequence[Position] | None) -> None:
        # Exclusive and Failover always rewind to the first unacked message
        # (SEM-3.7); the client cleared its queue when it asked.
        if consumer is not self.active:
            return
        self.requeue(consumer.take_pending())
        self.rewind()

    def _elect(self, new_consumer: Consumer | None = None) -> None:
        chosen = self._choose_active()
        previous = self.active
        if chosen is previous:
            if new_consumer is not None and new_consumer is not chosen:
                self._notify(new_consumer, False)
            return
        self.active = chosen
        if previous is not None:
            self.requeue(previous.take_pending())
        self.rewind()
        for consumer in self.consumers:
            if consumer is chosen or consumer is previous or consumer is new_consumer:
                self._notify(consumer, consumer is chosen)

    def _choose_active(self) -> Consumer | None:
        if self.exclusive:
            return self.consumers[0] if self.consumers else None
        return choose_active(
            self.consumers, self.topic_name, self.partition_index, self.consistent_hashing
        )

    def _notify(self, consumer: Consumer, is_active: bool) -> None:
        if not self.exclusive and self.active_change_listener is not None:
            self.active_change_listener(consumer, is_active)

    def _consumers_with_permits(self) -> int:
        active = self.active
        if active is None or not active.is_writable:
            return 0
        return active.permits

    def _dispatch(self, entries: deque[Entry]) -> int:
        active = self.active
        if active is None:
            return 0
        permits = active.permits
        chosen: list[Entry] = []
        while entries and entries[0].num_messages <= permits:
            entry = entries.popleft()
            permits -= entry.num_messages
            chosen.append(entry)
        if not chosen and entries and active.may_overdraw():
            # A batch larger than the permits left; see Consumer.may_overdraw.
            chosen.append(entries.popleft())
        if chosen:
            self._send(active, chosen)
        return len(chosen)
