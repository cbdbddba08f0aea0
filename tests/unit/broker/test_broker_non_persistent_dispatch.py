"""Non-persistent dispatch (dispatch or drop), one dispatcher per subscription
type as the factory builds them, on real broker Consumer objects attached to
recording connections."""

from __future__ import annotations

import pytest

from magnetar.broker.dispatchers.base import DispatcherSettings
from magnetar.broker.dispatchers.consumer import Consumer, KeySharedMode, KeySharedPolicy, SubType
from magnetar.broker.dispatchers.factory import new_non_persistent_dispatcher
from magnetar.broker.dispatchers.failover import choose_active
from magnetar.broker.dispatchers.non_persistent import (
    NonPersistentDispatcher,
    NonPersistentKeySharedDispatcher,
    NonPersistentSharedDispatcher,
    NonPersistentSingleActiveDispatcher,
)
from magnetar.broker.dispatchers.selectors import StickySelector
from magnetar.broker.errors import ConsumerAssignError, ConsumerBusyError, NotAllowedError
from magnetar.broker.storage.api import Entry, Position
from magnetar.broker.topics.non_persistent import NonPersistentSubscription
from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.frames import Payload
from magnetar.proto.hashes import key_shared_slot
from tests.unit.broker.recording import RecordingConnection

TOPIC = "non-persistent://public/default/t"
# With two auto-split consumers the second owns [0, 32767], the first the rest.
LOW = next(f"k{i}" for i in range(100) if key_shared_slot(f"k{i}") < 32768)
HIGH = next(f"k{i}" for i in range(100) if key_shared_slot(f"k{i}") >= 32768)
STICKY = KeySharedMode.STICKY


class Entries:
    """Entries as a non-persistent topic makes them, ids counting up."""

    def __init__(self) -> None:
        self.next_id = 0

    def __call__(self, key: str = "", num_messages: int = 1) -> Entry:
        metadata = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
        if key:
            metadata.partition_key = key
        if num_messages > 1:
            metadata.num_messages_in_batch = num_messages
        position = Position(1, self.next_id)
        self.next_id += 1
        return Entry(position, Payload.build(metadata, b"x").data, num_messages)


def _consumer(
    cid: int,
    sub_type: int,
    *,
    permits: int = 10,
    priority: int = 0,
    policy: KeySharedPolicy | None = None,
) -> Consumer:
    consumer = Consumer(
        "s",
        cid,
        f"c{cid}",
        sub_type,
        RecordingConnection(),
        priority_level=priority,
        key_shared=policy,
    )
    consumer.flow(permits)
    return consumer


def _received(consumer: Consumer) -> list[int]:
    """Entry ids of the MESSAGE frames `consumer` was sent."""
    cnx = consumer.cnx
    assert isinstance(cnx, RecordingConnection)
    return [entry_id for _, entry_id, _ in cnx.messages()]


def test_the_factory_builds_one_dispatcher_per_pattern() -> None:
    settings = DispatcherSettings(name="s")
    kinds: dict[int, type[NonPersistentDispatcher]] = {
        SubType.Exclusive: NonPersistentSingleActiveDispatcher,
        SubType.Failover: NonPersistentSingleActiveDispatcher,
        SubType.Shared: NonPersistentSharedDispatcher,
        SubType.Key_Shared: NonPersistentKeySharedDispatcher,
    }
    for sub_type, kind in kinds.items():
        assert type(new_non_persistent_dispatcher(sub_type, settings)) is kind
    with pytest.raises(NotAllowedError):
        new_non_persistent_dispatcher(99, settings)


def test_exclusive_sends_while_permits_are_positive_then_drops() -> None:
    """A batch may overdraw positive permits (Consumer.may_overdraw); at zero,
    or on a full socket, the entry is dropped."""
    entry = Entries()
    dispatcher = new_non_persistent_dispatcher(SubType.Exclusive, DispatcherSettings(name="s"))
    consumer = _consumer(1, SubType.Exclusive, permits=2)
    dispatcher.add_consumer(consumer)
    with pytest.raises(ConsumerBusyError, match="already has a consumer"):
        dispatcher.add_consumer(_consumer(2, SubType.Exclusive))
    assert dispatcher.dispatch(entry())
    assert dispatcher.dispatch(entry(num_messages=5))  # 1 permit left: overdrawn
    assert consumer.permits == -4
    assert not dispatcher.dispatch(entry())
    consumer.flow(10)
    cnx = consumer.cnx
    assert isinstance(cnx, RecordingConnection)
    cnx.writable = False
    assert not dispatcher.dispatch(entry())
    cnx.writable = True
    assert dispatcher.dispatch(entry())
    assert _received(consumer) == [0, 1, 4]
    assert consumer.unacked_messages == 7


def test_failover_elects_by_sem_4_2_and_tells_every_consumer_of_a_change() -> None:
    changes: list[tuple[str, bool]] = []
    settings = DispatcherSettings(
        name="s",
        topic_name=TOPIC,
        on_active_change=lambda consumer, active: changes.append((consumer.name, active)),
    )
    dispatcher = new_non_persistent_dispatcher(SubType.Failover, settings)
    assert isinstance(dispatcher, NonPersistentSingleActiveDispatcher)
    consumers = [_consumer(cid, SubType.Failover) for cid in (1, 2, 3)]
    dispatcher.add_consumer(consumers[0])
    assert changes == [("c1", True)]
    for consumer in consumers[1:]:
        changes.clear()
        before = dispatcher.active
        dispatcher.add_consumer(consumer)
        expected = choose_active(dispatcher.consumers, TOPIC, -1, False)
        assert dispatcher.active is expected
        if expected is before:
            assert changes == []  # the newcomer hears nothing
        else:
            assert changes == [(c.name, c is expected) for c in dispatcher.consumers]
    active = dispatcher.active
    assert active is not None
    entry = Entries()
    assert dispatcher.dispatch(entry())
    assert _received(active) == [0]
    changes.clear()
    dispatcher.remove_consumer(active)
    assert active.unacked_messages == 0  # dropped with it: nothing to hand back
    successor = dispatcher.active
    assert successor is not None and successor is not active
    assert changes == [(c.name, c is successor) for c in dispatcher.consumers]
    assert dispatcher.dispatch(entry())
    assert _received(successor) == [1]


def test_failover_on_a_partition_goes_by_index() -> None:
    settings = DispatcherSettings(name="s", topic_name=f"{TOPIC}-partition-1", partition_index=1)
    dispatcher = new_non_persistent_dispatcher(SubType.Failover, settings)
    assert isinstance(dispatcher, NonPersistentSingleActiveDispatcher)
    for cid in (3, 1, 2):
        dispatcher.add_consumer(_consumer(cid, SubType.Failover))
    assert dispatcher.active is not None and dispatcher.active.name == "c2"


def test_shared_goes_round_robin_within_priority_and_drops_when_all_are_full() -> None:
    dispatcher = new_non_persistent_dispatcher(SubType.Shared, DispatcherSettings(name="s"))
    first = _consumer(1, SubType.Shared, permits=2)
    second = _consumer(2, SubType.Shared, permits=1)
    low = _consumer(3, SubType.Shared, permits=1, priority=1)
    for consumer in (first, second, low):
        dispatcher.add_consumer(consumer)
    entry = Entries()
    assert all(dispatcher.dispatch(entry()) for _ in range(4))
    assert not dispatcher.dispatch(entry())
    assert (_received(first), _received(second), _received(low)) == ([0, 2], [1], [3])
    dispatcher.remove_consumer(first)
    assert first.unacked_messages == 0
    second.flow(1)
    assert dispatcher.dispatch(entry())
    assert _received(second) == [1, 5]


def test_key_shared_routes_by_key_and_drops_what_its_owner_cannot_take() -> None:
    """An entry goes to its key's owner only; when the owner has no permits it
    is dropped, not given to another consumer."""
    dispatcher = new_non_persistent_dispatcher(SubType.Key_Shared, DispatcherSettings(name="s"))
    high_owner = _consumer(1, SubType.Key_Shared)
    low_owner = _consumer(2, SubType.Key_Shared, permits=1)
    dispatcher.add_consumer(high_owner)
    dispatcher.add_consumer(low_owner)
    entry = Entries()
    assert dispatcher.dispatch(entry(LOW))
    assert dispatcher.dispatch(entry(HIGH))
    assert not dispatcher.dispatch(entry(LOW))
    assert (_received(high_owner), _received(low_owner)) == ([1], [0])
    dispatcher.remove_consumer(low_owner)  # its range merges into the other's
    assert dispatcher.dispatch(entry(LOW))
    assert _received(high_owner) == [1, 3]


def test_key_shared_takes_the_first_consumers_mode() -> None:
    dispatcher = new_non_persistent_dispatcher(SubType.Key_Shared, DispatcherSettings(name="s"))
    assert isinstance(dispatcher, NonPersistentKeySharedDispatcher)
    no_range = KeySharedPolicy(mode=STICKY)
    with pytest.raises(ConsumerAssignError):
        dispatcher.add_consumer(_consumer(1, SubType.Key_Shared, policy=no_range))
    assert dispatcher.consumers == [] and dispatcher.mode == KeySharedMode.AUTO_SPLIT
    low_half = KeySharedPolicy(mode=STICKY, hash_ranges=((0, 32767),))
    sticky = _consumer(2, SubType.Key_Shared, policy=low_half)
    dispatcher.add_consumer(sticky)
    assert isinstance(dispatcher.selector, StickySelector)
    with pytest.raises(ConsumerBusyError, match="another key-shared mode"):
        dispatcher.add_consumer(_consumer(3, SubType.Key_Shared))
    entry = Entries()
    assert dispatcher.dispatch(entry(LOW))
    assert not dispatcher.dispatch(entry(HIGH))  # nobody declared its slot
    assert _received(sticky) == [0]


def test_subscription_counts_what_it_sends_and_drops() -> None:
    emptied: list[NonPersistentSubscription] = []
    sub = NonPersistentSubscription(TOPIC, "s", DispatcherSettings(name="s"), emptied.append)
    entry = Entries()
    sub.dispatch(entry())  # nobody subscribed yet
    consumer = _consumer(1, SubType.Exclusive, permits=3)
    sub.add_consumer(consumer)
    with pytest.raises(ConsumerBusyError, match="cannot attach a Shared consumer"):
        sub.add_consumer(_consumer(2, SubType.Shared))
    sub.dispatch(entry(num_messages=3))
    sub.dispatch(entry(num_messages=2))
    assert (sub.dispatched.messages, sub.dropped_messages) == (3, 3)
    assert sub.stats().msg_dropped == 3
    sub.remove_consumer(consumer)
    assert emptied == [sub] and sub.consumers == []
    # Nothing carries over: a newcomer of another type gets its own dispatcher.
    shared = _consumer(3, SubType.Shared)
    sub.add_consumer(shared)
    assert sub.sub_type == SubType.Shared
    sub.dispatch(entry())
    assert _received(shared) == [3]
