"""Marker entries (replicated subscriptions, issue 45.4) reach no consumer,
though dispatch looks for them only up to the topic's marker horizon: the
markers a remote's replicator stored before the topic was loaded again, and
those it stores after."""

from __future__ import annotations

from pathlib import Path

from magnetar.broker.dispatchers.consumer import SubType
from magnetar.broker.features.markers import SnapshotRequest, marker_entry
from magnetar.broker.features.replicated import producer_name, sequence_id
from magnetar.broker.storage import FileManagedLedgerFactory
from magnetar.broker.storage.api import (
    LATEST,
    InitialPosition,
    ManagedLedger,
    ManagedLedgerConfig,
    Position,
    SyncPolicy,
)
from magnetar.broker.topics.base import SubscribeOptions
from magnetar.broker.topics.persistent import PersistentTopic
from magnetar.broker.topics.publish_path import AccessMode
from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.frames import Payload
from magnetar.proto.naming import TopicName
from tests.support.polling import eventually_async
from tests.unit.broker.recording import RecordingConnection

NAME = TopicName.parse("persistent://public/geo/t")
LEDGER = "public/geo/persistent/t"


async def _message(topic: PersistentTopic) -> Position:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    return await topic.append(Payload.build(metadata, b"m").data, 1)


async def _remote_marker(topic: PersistentTopic, ledger: ManagedLedger, source: Position) -> None:
    """A snapshot request stored as the replicator from cluster b stores it."""
    name = producer_name("b")
    await topic.accept_replicator(name)
    producer = topic.add_producer(
        RecordingConnection(), 1, name, access_mode=AccessMode.Shared, user_provided_name=True
    )
    stored = ledger.number_of_entries
    seq = sequence_id(source)
    producer.publish(seq, seq, 1, marker_entry(SnapshotRequest(f"{source}", "b"), ["a"]))
    assert topic.marker_horizon.last == LATEST  # every entry may be one now
    await eventually_async("the marker stored", lambda: ledger.number_of_entries > stored)
    topic.remove_producer(producer)


async def test_markers_stored_before_a_reload_reach_no_consumer(tmp_path: Path) -> None:
    """Issue 45.4: a marker a replicator stored before the topic loaded
    again is under the new load's horizon (the last entry stored before),
    so it is dropped and acknowledged; one stored after the reload moves
    the horizon and is dropped too; the messages all arrive."""
    factory = await FileManagedLedgerFactory.create(
        str(tmp_path), ManagedLedgerConfig(sync_policy=SyncPolicy.NONE)
    )
    try:
        ledger = await factory.open(LEDGER)
        before = PersistentTopic(NAME, ledger)
        messages = [await _message(before)]
        await _remote_marker(before, ledger, Position(3, 0))
        messages.append(await _message(before))
        await before.close(notify_clients=False)

        ledger = await factory.open(LEDGER)
        topic = PersistentTopic(NAME, ledger)
        assert topic.marker_horizon.last == messages[-1]
        cnx = RecordingConnection()
        earliest = InitialPosition.EARLIEST
        options = SubscribeOptions(1, "s", SubType.Exclusive, "c", initial_position=earliest)
        consumer, _ = await topic.subscribe(cnx, options)
        sub = topic.subscriptions["s"]
        sub.consumer_flow(consumer, 10)

        def received(count: int) -> list[int]:
            """Entry ids dispatched, once `count` came."""
            return [m[1] for m in cnx.messages()] if len(cnx.messages()) >= count else []

        await eventually_async("the old messages dispatched", lambda: bool(received(2)))
        assert received(2) == [p.entry_id for p in messages]
        messages.append(await _message(topic))
        assert topic.marker_horizon.last == messages[1]  # a message moves nothing
        # Read alone, past the horizon that the marker moves.
        await eventually_async("the new message dispatched", lambda: bool(received(3)))
        await _remote_marker(topic, ledger, Position(3, 1))
        messages.append(await _message(topic))
        await eventually_async("the last message dispatched", lambda: bool(received(4)))
        assert received(4) == [p.entry_id for p in messages]
        sub.acknowledge_individual(consumer, messages, [None] * len(messages))
        # The markers were acknowledged by the dispatcher: nothing is left.
        assert sub.cursor.backlog_entries == 0
        await topic.close(notify_clients=False)
    finally:
        await factory.close()
