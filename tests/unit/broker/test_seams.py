"""The topic and storage seams on real objects: the concrete classes
implement the interfaces that is_persistent() narrows to, and a real ledger
answers the stats the admin API and the metrics read through the interface.
(tests/unit/test_layering.py checks from the source that nothing above
topics/ reaches past the seams.)"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from magnetar.broker.storage import FileManagedLedgerFactory
from magnetar.broker.storage.api import (
    WRITE_LATENCY_BOUNDS,
    ManagedLedger,
    ManagedLedgerConfig,
    SyncPolicy,
)
from magnetar.broker.topics.base import (
    StoredSubscription,
    StoredTopic,
    Topic,
    is_persistent,
)
from magnetar.broker.topics.non_persistent import NonPersistentTopic
from magnetar.broker.topics.persistent import PersistentTopic
from magnetar.broker.topics.persistent_subscription import PersistentSubscription
from magnetar.proto.naming import TopicName


# mypy --strict checks these: the concrete classes implement the interfaces
# that is_persistent() narrows to on their word.
def _stored_topic(topic: PersistentTopic) -> StoredTopic:
    return topic


def _stored_subscription(sub: PersistentSubscription) -> StoredSubscription:
    return sub


def _topic(topic: NonPersistentTopic) -> Topic:
    return topic


@pytest.fixture
async def ledger(tmp_path: Path) -> AsyncIterator[ManagedLedger]:
    factory = await FileManagedLedgerFactory.create(
        str(tmp_path), ManagedLedgerConfig(sync_policy=SyncPolicy.NONE)
    )
    try:
        yield await factory.open("public/default/persistent/seams")
    finally:
        await factory.close()


async def test_is_persistent_narrows_by_the_topics_word(ledger: ManagedLedger) -> None:
    stored = PersistentTopic(TopicName.parse("persistent://public/default/seams"), ledger)
    dropped = NonPersistentTopic(TopicName.parse("non-persistent://public/default/seams"))
    topics: list[Topic] = [stored, dropped]
    assert [is_persistent(t) for t in topics] == [True, False]
    await dropped.close(notify_clients=False)
    await stored.close(notify_clients=False)


async def test_ledger_summaries_and_write_stats(ledger: ManagedLedger) -> None:
    assert ledger.write_stats().entries_written == 0
    payloads = [b"a" * 10, b"b" * 20, b"c" * 30]
    for data in payloads:
        await ledger.add_entry(data)
    (summary,) = ledger.ledger_summaries()
    assert summary.ledger_id == ledger.last_confirmed_position.ledger_id
    assert summary.entries == 3
    # Records: the entry bytes plus a header each.
    assert summary.size > sum(map(len, payloads))
    written = ledger.write_stats()
    assert (written.entries_written, written.bytes_written) == (3, 60)
    assert len(written.write_latency_counts) == len(WRITE_LATENCY_BOUNDS) + 1
    assert sum(written.write_latency_counts) >= 1
    assert written.write_latency_sum >= 0.0
