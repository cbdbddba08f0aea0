"""The receiving side of geo-replication (issue 45.2), without sockets: a
replicator's sequence ids are source positions, its entries count for
pulsar.repl.<cluster> when deduplication is rebuilt, and a deduplicated
append that lands after its producer closed still counts as persisted (else
the resend after a reconnect would be refused as "in flight" for ever)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from magnetar.broker.features.dedup import DupStatus, MessageDeduplication
from magnetar.broker.features.replicated import position_of, producer_name, sequence_id
from magnetar.broker.storage import FileManagedLedgerFactory
from magnetar.broker.storage.api import ManagedLedger, ManagedLedgerConfig, Position, SyncPolicy
from magnetar.broker.topics.persistent import PersistentTopic
from magnetar.broker.topics.publish_path import AccessMode
from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.frames import Payload
from magnetar.proto.naming import TopicName
from tests.support.polling import eventually_async
from tests.unit.broker.recording import RecordingConnection


@pytest.fixture
async def ledger(tmp_path: Path) -> AsyncIterator[ManagedLedger]:
    factory = await FileManagedLedgerFactory.create(
        str(tmp_path), ManagedLedgerConfig(sync_policy=SyncPolicy.NONE)
    )
    try:
        yield await factory.open("public/geo/persistent/t")
    finally:
        await factory.close()


def _entry(producer: str, sequence: int, replicated_from: str = "") -> bytes:
    metadata = pb.MessageMetadata(producer_name=producer, sequence_id=sequence, publish_time=1)
    if replicated_from:
        metadata.replicated_from = replicated_from
    return Payload.build(metadata, b"x").data


def test_sequence_ids_are_positions_in_order() -> None:
    """Issue 45.2: a position's sequence id gives the position back, and
    position order is sequence order (across ledgers too)."""
    positions = [Position(1, 0), Position(1, 9999), Position(2, 0), Position(1025, 7)]
    ids = [sequence_id(p) for p in positions]
    assert ids == sorted(ids)
    assert [position_of(i) for i in ids] == positions
    assert producer_name("a") == "pulsar.repl.a"
    with pytest.raises(ValueError, match="does not fit"):
        sequence_id(Position(1 << 33, 0))


async def test_replay_counts_replicated_entries_for_the_replicator(
    ledger: ManagedLedger,
) -> None:
    """Issue 45.2: rebuilt from the stored entries, a replicated entry counts
    for pulsar.repl.<replicated_from> (its sequence id a source position),
    a local one for its own producer."""
    source = sequence_id(Position(7, 41))
    await MessageDeduplication("t", ledger).enable()  # its cursor, before the entries
    await ledger.add_entry(_entry("orig", 3))
    await ledger.add_entry(_entry("orig", source, replicated_from="a"))
    await ledger.add_entry(_entry("orig", source + 1, replicated_from="a"))
    dedup = MessageDeduplication("t", ledger)
    await dedup.enable()
    assert dedup.persisted == {"orig": 3, "pulsar.repl.a": source + 1}
    assert dedup.has_replicated
    assert dedup.check("pulsar.repl.a", source, source) is DupStatus.DUPLICATE
    await dedup.disable()


async def test_an_append_landing_after_its_producer_closed_counts(
    ledger: ManagedLedger,
) -> None:
    """Issue 45.2: a replicator's connection drops with an append in flight;
    when the append lands its sequence id counts as persisted, so the resend
    on the next connection is a duplicate (not refused as in flight); the
    next PRODUCER waits for it, so PRODUCER_SUCCESS tells the replicator
    where the remote really is."""
    topic = PersistentTopic(TopicName.parse("persistent://public/geo/t"), ledger)
    await topic.accept_replicator(producer_name("a"))
    name = producer_name("a")
    cnx = RecordingConnection()
    producer = topic.add_producer(
        cnx, 1, name, access_mode=AccessMode.Shared, user_provided_name=True
    )
    source = sequence_id(Position(3, 5))
    producer.publish(source, source, 1, _entry("orig", source, replicated_from="a"))
    topic.remove_producer(producer)  # the connection is gone, the append is not
    dedup = topic.replicated_dedup
    assert dedup is not None
    assert dedup.pushed[name] == source and name not in dedup.persisted
    # The next connection's PRODUCER waits for the append to land.
    await topic.accept_replicator(name)
    assert topic.last_sequence_id(name) == source
    assert dedup.check(name, source, source) is DupStatus.DUPLICATE
    assert topic.deduplication is None  # local producers stay unchecked
    await topic.close(notify_clients=False)


async def test_a_replicator_counts_what_it_stored(ledger: ManagedLedger) -> None:
    """Issue 45.3: what a replicator stores counts for its rate in (the
    replication stats' msgRateIn), a duplicate it resends does not; a local
    producer has no such count."""
    topic = PersistentTopic(TopicName.parse("persistent://public/geo/t"), ledger)
    name = producer_name("a")
    await topic.accept_replicator(name)
    cnx = RecordingConnection()
    producer = topic.add_producer(
        cnx, 1, name, access_mode=AccessMode.Shared, user_provided_name=True
    )
    source = sequence_id(Position(3, 5))
    data = _entry("orig", source, replicated_from="a")
    producer.publish(source, source, 1, data)
    dedup = topic.replicated_dedup
    assert dedup is not None
    await eventually_async("the entry persisted", lambda: dedup.persisted.get(name) == source)
    producer.publish(source, source, 1, data)  # the resend after a reconnect
    await eventually_async("both answered", lambda: producer.pending_count == 0)
    counted = producer.replicated_in
    assert counted is not None and (counted.messages, counted.bytes) == (1, len(data))
    local = topic.add_producer(
        cnx, 2, "local", access_mode=AccessMode.Shared, user_provided_name=True
    )
    assert local.replicated_in is None
    await topic.close(notify_clients=False)
