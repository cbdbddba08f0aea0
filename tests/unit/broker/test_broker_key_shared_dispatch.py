"""Key_Shared dispatch over real storage (no sockets): the join rule
(SEM-4.4.4), redelivery to a key's current owner, the bounded look-ahead,
delayed delivery and refused consumers, observed through recording
connections."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from magnetar.broker.dispatchers.base import DispatcherSettings
from magnetar.broker.dispatchers.consumer import Consumer, KeySharedMode, KeySharedPolicy, SubType
from magnetar.broker.dispatchers.key_shared import KeySharedDispatcher
from magnetar.broker.errors import BrokerServiceError
from magnetar.broker.storage import FileManagedLedgerFactory
from magnetar.broker.storage.api import (
    InitialPosition,
    ManagedLedger,
    ManagedLedgerConfig,
    Position,
    SyncPolicy,
)
from magnetar.broker.topics.persistent_subscription import PersistentSubscription
from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.errors import ServerError
from magnetar.proto.frames import Payload
from magnetar.proto.hashes import key_shared_slot
from tests.unit.broker.recording import RecordingConnection

Recorder = RecordingConnection
# With two auto-split consumers the second owns [0, 32767], the first the rest.
LOW = next(f"k{i}" for i in range(100) if key_shared_slot(f"k{i}") < 32768)
HIGH = next(f"k{i}" for i in range(100) if key_shared_slot(f"k{i}") >= 32768)


@pytest.fixture
async def ledger(tmp_path: Path) -> AsyncIterator[ManagedLedger]:
    factory = await FileManagedLedgerFactory.create(
        str(tmp_path), ManagedLedgerConfig(sync_policy=SyncPolicy.NONE)
    )
    try:
        yield await factory.open("public/default/persistent/ks")
    finally:
        await factory.close()


async def _subscription(
    ledger: ManagedLedger, look_ahead: int = 5000
) -> AsyncIterator[PersistentSubscription]:
    cursor = await ledger.open_cursor("s", InitialPosition.EARLIEST)
    settings = DispatcherSettings(name="ks/s", key_shared_look_ahead=look_ahead)
    sub = PersistentSubscription("ks", "s", ledger, cursor, settings)
    try:
        yield sub
    finally:
        await sub.close()


@pytest.fixture
async def sub(ledger: ManagedLedger) -> AsyncIterator[PersistentSubscription]:
    async for sub in _subscription(ledger):
        yield sub


async def _publish(
    sub: PersistentSubscription, key: str, count: int = 1, deliver_at_time: int = 0
) -> list[Position]:
    """Store entries as a topic does, telling the subscription."""
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    metadata.partition_key = key
    if deliver_at_time:
        metadata.deliver_at_time = deliver_at_time
    data = Payload.build(metadata, b"x").data
    positions = [await sub.ledger.add_entry(data, 1) for _ in range(count)]
    sub.on_new_entries()
    return positions


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)
    await asyncio.sleep(0.02)


async def _join(
    sub: PersistentSubscription,
    cid: int,
    *,
    permits: int = 100,
    policy: KeySharedPolicy | None = None,
) -> tuple[Consumer, Recorder]:
    cnx = Recorder()
    consumer = Consumer(
        "s", cid, f"c{cid}", SubType.Key_Shared, cnx, key_shared=policy or KeySharedPolicy()
    )
    await sub.add_consumer(consumer)
    if permits:
        sub.consumer_flow(consumer, permits)
    return consumer, cnx


def _entry_ids(cnx: Recorder) -> list[int]:
    return [entry_id for _, entry_id, _ in cnx.messages()]


async def test_sem_4_4_4_joiner_waits_for_earlier_acks(
    ledger: ManagedLedger, sub: PersistentSubscription
) -> None:
    """SEM-4.4.4: a consumer joining while messages are unacked gets nothing
    at or after the read position of its join until all before it are acked."""
    c1, c1_cnx = await _join(sub, 1)
    early = await _publish(sub, LOW) + await _publish(sub, HIGH)
    await _settle()
    assert _entry_ids(c1_cnx) == [0, 1]
    _, c2_cnx = await _join(sub, 2)  # takes LOW; marked at entry 2
    late = await _publish(sub, LOW) + await _publish(sub, HIGH)
    await _settle()
    assert _entry_ids(c1_cnx) == [0, 1, 3]  # HIGH stays with c1
    assert _entry_ids(c2_cnx) == []
    sub.acknowledge_individual(c1, [early[0]], [None])
    await _settle()
    assert _entry_ids(c2_cnx) == []  # entry 1 is still unacked
    sub.acknowledge_individual(c1, [early[1]], [None])
    await _settle()
    assert _entry_ids(c2_cnx) == [late[0].entry_id]


async def test_sem_4_4_4_out_of_order_consumer_is_not_held(
    ledger: ManagedLedger, sub: PersistentSubscription
) -> None:
    """SEM-4.4.4: allow_out_of_order_delivery on the joining consumer lifts the rule."""
    await _join(sub, 1)
    await _publish(sub, LOW)
    await _settle()
    _, c2_cnx = await _join(sub, 2, policy=KeySharedPolicy(allow_out_of_order_delivery=True))
    late = await _publish(sub, LOW)
    await _settle()
    assert _entry_ids(c2_cnx) == [late[0].entry_id]


async def test_sem_4_4_leaver_messages_go_to_current_owner_in_order(
    ledger: ManagedLedger, sub: PersistentSubscription
) -> None:
    """SEM-4.4, SEM-3.8: a leaver's unacked messages go to the key's new
    owner, oldest first, before the key's newer messages, counted as redelivered."""
    c1, _ = await _join(sub, 1)
    held_back = await _publish(sub, LOW, 3)
    await _settle()
    c2, c2_cnx = await _join(sub, 2)  # owns LOW now, marked after entry 2
    newer = await _publish(sub, LOW, 2)
    await _settle()
    assert _entry_ids(c2_cnx) == []
    sub.remove_consumer(c1)
    await _settle()
    assert c2_cnx.messages() == [(2, p.entry_id, 1) for p in held_back]
    sub.acknowledge_individual(c2, held_back, [None] * 3)
    await _settle()
    assert _entry_ids(c2_cnx)[3:] == [p.entry_id for p in newer]


async def test_redeliver_request_goes_back_before_newer_messages(
    ledger: ManagedLedger, sub: PersistentSubscription
) -> None:
    """SEM-3.7, SEM-4.4: ids named in REDELIVER go to the key's owner again,
    ahead of that key's messages read after them."""
    c1, c1_cnx = await _join(sub, 1, permits=2)
    first = await _publish(sub, HIGH, 4)
    await _settle()
    assert _entry_ids(c1_cnx) == [0, 1]
    c1.flow(2)
    sub.redeliver(c1, [first[0]])
    await _settle()
    assert c1_cnx.messages()[2:] == [(1, 0, 1), (1, 2, 0)]


async def test_look_ahead_is_bounded(ledger: ManagedLedger) -> None:
    """SEM-4.4: entries held for a consumer without permits stop reading at
    the look-ahead bound; the other keys wait beyond it, and all flows again
    once that consumer grants permits, per key in order."""
    async for sub in _subscription(ledger, look_ahead=10):
        c1, c1_cnx = await _join(sub, 1, permits=0)
        _, c2_cnx = await _join(sub, 2)
        await _publish(sub, HIGH, 12)  # c1's, it has no permits
        beyond = await _publish(sub, LOW, 3)
        await _settle()
        assert _entry_ids(c2_cnx) == []
        sub.consumer_flow(c1, 100)
        await _settle()
        assert _entry_ids(c1_cnx) == list(range(12))
        assert _entry_ids(c2_cnx) == [p.entry_id for p in beyond]


async def test_stuck_consumer_does_not_stop_other_keys(
    ledger: ManagedLedger, sub: PersistentSubscription
) -> None:
    """SEM-4.4: within the look-ahead, a consumer without permits holds back
    only its own keys."""
    c1, c1_cnx = await _join(sub, 1, permits=0)
    _, c2_cnx = await _join(sub, 2)
    for _ in range(5):
        await _publish(sub, HIGH)
        await _publish(sub, LOW)
    await _settle()
    assert _entry_ids(c2_cnx) == [1, 3, 5, 7, 9]
    assert _entry_ids(c1_cnx) == []
    sub.consumer_flow(c1, 10)
    await _settle()
    assert _entry_ids(c1_cnx) == [0, 2, 4, 6, 8]


async def test_sem_8_1_delayed_messages_held(
    ledger: ManagedLedger, sub: PersistentSubscription
) -> None:
    """SEM-8.1: Key_Shared holds a message until its deliver_at_time."""
    _, cnx = await _join(sub, 1)
    await _publish(sub, HIGH, deliver_at_time=2**62)
    now = await _publish(sub, HIGH)
    await _settle()
    assert _entry_ids(cnx) == [now[0].entry_id]


async def test_sem_4_4_3_refused_consumers_change_nothing(
    ledger: ManagedLedger, sub: PersistentSubscription
) -> None:
    """SEM-4.4.3: an overlapping sticky consumer is refused with
    ConsumerAssignError; a consumer of another Key_Shared mode with
    ConsumerBusy; the attached consumers and their routing stay."""
    sticky = KeySharedPolicy(mode=KeySharedMode.STICKY, hash_ranges=((0, 30000),))
    first, cnx = await _join(sub, 1, policy=sticky)
    overlapping = KeySharedPolicy(mode=KeySharedMode.STICKY, hash_ranges=((30000, 40000),))
    with pytest.raises(BrokerServiceError) as refused:
        await _join(sub, 2, policy=overlapping)
    assert refused.value.code == ServerError.ConsumerAssignError
    with pytest.raises(BrokerServiceError) as busy:
        await _join(sub, 3)  # AUTO_SPLIT on a STICKY subscription
    assert busy.value.code == ServerError.ConsumerBusy
    assert sub.consumers == [first]
    dispatcher = sub._dispatcher
    assert isinstance(dispatcher, KeySharedDispatcher)
    assert dispatcher.selector.ranges() == {first: [(0, 30000)]}
    key = next(f"s{i}" for i in range(100) if key_shared_slot(f"s{i}") <= 30000)
    await _publish(sub, key)
    await _settle()
    assert _entry_ids(cnx) == [0]
