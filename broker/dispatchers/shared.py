"""Shared subscription dispatch (SEM-4.3).

Each entry goes to exactly one consumer. Consumers are grouped by priority
level (0 first); within the highest level that has a consumer able to take
the entry, they are served round-robin, one entry per turn. Lower levels get
entries only when no consumer of a higher level can take them. A consumer
can take an entry when its socket is writable and its permits cover the
entry's message count (SEM-2.2; see Consumer.may_overdraw for large batches)
and it is not blocked on unacked messages (dispatchers/base.py).

Worked example (SEM-4.3): C1 (priority 0, 2 permits), C2 (0, 1), C3 (0, 1),
C4 (1, 2), C5 (1, 1) receive single-message entries in the order
C1, C2, C3, C1, C4, C5, C4.
"""

from __future__ import annotations

from collections import deque

from magnetar.broker.dispatchers.base import DispatcherSettings, PersistentDispatcher
from magnetar.broker.dispatchers.consumer import Consumer
from magnetar.broker.storage.api import Entry, ManagedCursor, ManagedLedger


class RoundRobinSelector:
    """Round-robin within priority levels; pure logic, no I/O."""

    def __init__(self) -> None:
        # Ascending priority levels, each its consumers in join order.
        self._levels: dict[int, list[Consumer]] = {}
        self._order: list[int] = []
        self._next: dict[int, int] = {}

    def add(self, consumer: Consumer) -> None:
        level = consumer.priority_level
        if level not in self._levels:
            self._levels[level] = []
            self._next[level] = 0
            self._order = sorted(self._levels)
        self._levels[level].append(consumer)

    def remove(self, consumer: Consumer) -> None:
        level = consumer.priority_level
        members = self._levels.get(level)
        if members is None or consumer not in members:
            return
        index = members.index(consumer)
        members.pop(index)
        if not members:
            del self._levels[level], self._next[level]
            self._order = sorted(self._levels)
        elif self._next[level] > index:
            # Keep pointing at the consumer that was next.
            self._next[level] -= 1

    def select(self, cost: int) -> Consumer | None:
        """The consumer to get an entry of `cost` messages, advancing the turn.

        Consumers whose permits cover the cost come first; only when none has
        enough may one overdraw (Consumer.may_overdraw), so a large batch
        cannot stall the subscription.
        """
        chosen = self._select(cost, overdraw=False)
        if chosen is None and cost > 1:
            chosen = self._select(cost, overdraw=True)
        return chosen

    def _select(self, cost: int, *, overdraw: bool) -> Consumer | None:
        for level in self._order:
            members = self._levels[level]
            count = len(members)
            start = self._next[level] % count
            for step in range(count):
                index = (start + step) % count
                consumer = members[index]
                fits = consumer.permits >= cost or (overdraw and consumer.may_overdraw())
                if fits and consumer.is_writable and not consumer.blocked:
                    self._next[level] = index + 1
                    return consumer
        return None

    def available_permits(self) -> int:
        return sum(
            (min(c.permits, c.room()) if c.max_unacked else c.permits)
            for members in self._levels.values()
            for c in members
            if c.permits > 0 and c.is_writable and not c.blocked
        )


class SharedDispatcher(PersistentDispatcher):
    supports_delayed_delivery = True
    supports_unacked_limits = True

    def __init__(
        self, ledger: ManagedLedger, cursor: ManagedCursor, settings: DispatcherSettings
    ) -> None:
        super().__init__(ledger, cursor, settings)
        self.selector = RoundRobinSelector()

    def add_consumer(self, consumer: Consumer) -> None:
        self._limit_consumer(consumer)
        self.consumers.append(consumer)
        self.selector.add(consumer)
        self.wake()

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer not in self.consumers:
            return
        self.consumers.remove(consumer)
        self.selector.remove(consumer)
        self._give_back(consumer.take_pending())

    def _consumers_with_permits(self) -> int:
        return self.selector.available_permits()

    def _dispatch(self, entries: deque[Entry]) -> int:
        batches: dict[int, tuple[Consumer, list[Entry]]] = {}
        dispatched = 0
        select = self.selector.select
        room = self._room
        while entries:
            if room is not None and room <= 0:
                break  # the subscription's unacked limit is reached
            entry = entries[0]
            consumer = select(entry.num_messages)
            if consumer is None:
                break
            entries.popleft()
            # Reserve the permits now so the next selection sees them spent.
            n = entry.num_messages
            consumer.permits -= n
            if room is not None:
                room -= n
            if consumer.max_unacked:
                # Reserve the unacked room too: blocked here at the limit, the
                # block stands once sent (_send adds the same count).
                consumer.unacked += n
                if consumer.unacked >= consumer.max_unacked:
                    consumer.blocked = True
            slot = batches.get(id(consumer))
            if slot is None:
                batches[id(consumer)] = (consumer, [entry])
            else:
                slot[1].append(entry)
            dispatched += 1
        for consumer, chosen in batches.values():
            reserved = sum(e.num_messages for e in chosen)
            consumer.permits += reserved
            if consumer.max_unacked:
                consumer.unacked -= reserved
            self._send(consumer, chosen)
        return dispatched
