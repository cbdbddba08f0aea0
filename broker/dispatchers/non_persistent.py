"""Non-persistent dispatch: each entry goes out now or is dropped.

Nothing is stored, so nothing waits and nothing is delivered again: an entry
goes to the consumer the subscription's type picks when that consumer can
take it (its socket is writable and it has permits; see
Consumer.may_overdraw), else the subscription drops it, as Pulsar's
non-persistent dispatchers do. The patterns are the persistent ones (SEM-4):
one active consumer (Exclusive, Failover), round robin within priority levels
(Shared), the owner of the key's hash (Key_Shared, with the same selectors).
A consumer that leaves takes its unacked messages with it: there is nothing
to hand back.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from magnetar.broker.dispatchers.base import ActiveChangeListener, DispatcherSettings
from magnetar.broker.dispatchers.consumer import Consumer, KeySharedMode, KeySharedPolicy
from magnetar.broker.dispatchers.entries import key_hash_and_deliver_at
from magnetar.broker.dispatchers.failover import choose_active
from magnetar.broker.dispatchers.selectors import ConsumerSelector, new_selector
from magnetar.broker.dispatchers.shared import RoundRobinSelector
from magnetar.broker.errors import ConsumerBusyError
from magnetar.broker.storage.api import Entry, Position

_DEFAULT_POLICY = KeySharedPolicy()


def _no_redeliveries(_position: Position) -> int:
    return 0


class NonPersistentDispatcher(ABC):
    def __init__(self, settings: DispatcherSettings) -> None:
        self.name = settings.name
        self.consumers: list[Consumer] = []

    @abstractmethod
    def add_consumer(self, consumer: Consumer) -> None:
        """Attach a consumer; raises BrokerServiceError (nothing changed) when
        it is refused."""

    def remove_consumer(self, consumer: Consumer) -> None:
        """Detach a consumer; its unacked messages are dropped, as in Pulsar."""
        if consumer not in self.consumers:
            return
        self.consumers.remove(consumer)
        consumer.take_pending()
        self._removed(consumer)

    @abstractmethod
    def _removed(self, consumer: Consumer) -> None:
        """Forget a consumer just taken off `consumers`."""

    @abstractmethod
    def _select(self, entry: Entry) -> Consumer | None:
        """The consumer to take `entry` now; None: it is dropped."""

    def dispatch(self, entry: Entry) -> bool:
        """Send `entry` to one consumer now; False: nobody could take it."""
        consumer = self._select(entry)
        if consumer is None:
            return False
        consumer.send_entries([entry], _no_redeliveries)
        return True


class NonPersistentSingleActiveDispatcher(NonPersistentDispatcher):
    """Exclusive and Failover: the active consumer gets everything it can
    take. Failover elects by SEM-4.2's rule (failover.py); a change is told
    to every consumer. There is no read position to rewind."""

    def __init__(self, settings: DispatcherSettings, *, exclusive: bool) -> None:
        super().__init__(settings)
        self.exclusive = exclusive
        self.partition_index = settings.partition_index
        self.topic_name = settings.topic_name
        self.consistent_hashing = settings.failover_consistent_hashing
        self.active_change_listener: ActiveChangeListener | None = settings.on_active_change
        self.active: Consumer | None = None

    def add_consumer(self, consumer: Consumer) -> None:
        if self.exclusive and self.consumers:
            raise ConsumerBusyError(f"Exclusive subscription {self.name!r} already has a consumer")
        self.consumers.append(consumer)
        self._elect()

    def _removed(self, consumer: Consumer) -> None:
        self._elect()

    def _elect(self) -> None:
        if self.exclusive or not self.consumers:
            self.active = self.consumers[0] if self.consumers else None
            return
        chosen = choose_active(
            self.consumers, self.topic_name, self.partition_index, self.consistent_hashing
        )
        previous, self.active = self.active, chosen
        listener = self.active_change_listener
        if chosen is not previous and listener is not None:
            for consumer in self.consumers:
                listener(consumer, consumer is chosen)

    def _select(self, entry: Entry) -> Consumer | None:
        active = self.active
        if active is None or not active.is_writable or not active.may_overdraw():
            return None
        return active


class NonPersistentSharedDispatcher(NonPersistentDispatcher):
    """Shared: round robin within priority levels (SEM-4.3), by the entry's
    message count against each consumer's permits."""

    def __init__(self, settings: DispatcherSettings) -> None:
        super().__init__(settings)
        self.selector = RoundRobinSelector()

    def add_consumer(self, consumer: Consumer) -> None:
        self.consumers.append(consumer)
        self.selector.add(consumer)

    def _removed(self, consumer: Consumer) -> None:
        self.selector.remove(consumer)

    def _select(self, entry: Entry) -> Consumer | None:
        return self.selector.select(entry.num_messages)


class NonPersistentKeySharedDispatcher(NonPersistentDispatcher):
    """Key_Shared: the owner of the entry's key hash (SEM-4.4), by the
    selector the first consumer's mode names. Nothing is redelivered, so
    there is no ordering across joins to keep; an entry whose owner cannot
    take it is dropped, not given to another consumer."""

    def __init__(self, settings: DispatcherSettings) -> None:
        super().__init__(settings)
        self.consistent_hashing = settings.key_shared_consistent_hashing
        self.mode: int = KeySharedMode.AUTO_SPLIT
        self.selector: ConsumerSelector = new_selector(
            self.mode, consistent_hashing=self.consistent_hashing
        )

    def add_consumer(self, consumer: Consumer) -> None:
        mode = (consumer.key_shared or _DEFAULT_POLICY).mode
        selector = self.selector
        if not self.consumers and mode != self.mode:
            selector = new_selector(mode, consistent_hashing=self.consistent_hashing)
        elif mode != self.mode:
            raise ConsumerBusyError(
                f"Key_Shared subscription {self.name!r} has consumers of another key-shared mode"
            )
        selector.add_consumer(consumer)  # ConsumerAssignError: nothing changed
        self.mode, self.selector = mode, selector
        self.consumers.append(consumer)

    def _removed(self, consumer: Consumer) -> None:
        self.selector.remove_consumer(consumer)

    def _select(self, entry: Entry) -> Consumer | None:
        owner = self.selector.select(key_hash_and_deliver_at(entry.data)[0])
        if owner is None or not owner.is_writable or not owner.may_overdraw():
            return None
        return owner
