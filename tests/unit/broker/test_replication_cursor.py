"""A topic's replication cursor (issue 45.2): it is the broker's own (no
subscription), and while it has a backlog the topic is not inactive, so the
inactive-topic sweep never deletes entries a remote cluster still lacks."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from magnetar.broker.errors import NotAllowedError
from magnetar.broker.features.replicated import cursor_name
from magnetar.broker.service.inactivity import topic_is_inactive
from magnetar.broker.storage import FileManagedLedgerFactory
from magnetar.broker.storage.api import InitialPosition, ManagedLedgerConfig, SyncPolicy
from magnetar.broker.topics.persistent import PersistentTopic
from magnetar.proto.naming import TopicName


@pytest.fixture
async def topic(tmp_path: Path) -> AsyncIterator[PersistentTopic]:
    factory = await FileManagedLedgerFactory.create(
        str(tmp_path), ManagedLedgerConfig(sync_policy=SyncPolicy.NONE)
    )
    ledger = await factory.open("public/geo/persistent/t")
    loaded = PersistentTopic(TopicName.parse("persistent://public/geo/t"), ledger)
    try:
        yield loaded
    finally:
        await loaded.close(notify_clients=False)
        await factory.close()


async def test_backlog_of_a_replication_cursor_keeps_the_topic(topic: PersistentTopic) -> None:
    """Issue 45.2: with entries the remote lacks the topic is active in both
    deletion modes; once they are acknowledged it is inactive again."""
    cursor = await topic.ledger.open_cursor(cursor_name("b"), InitialPosition.EARLIEST)
    position = await topic.ledger.add_entry(b"entry")
    for mode in ("delete_when_no_subscriptions", "delete_when_subscriptions_caught_up"):
        assert not topic_is_inactive(topic, mode)
    cursor.delete((position,))
    for mode in ("delete_when_no_subscriptions", "delete_when_subscriptions_caught_up"):
        assert topic_is_inactive(topic, mode)


async def test_replication_cursor_is_no_subscription(topic: PersistentTopic) -> None:
    """Issue 45.2: pulsar.repl.<cluster> is not listed, opened or created as
    a subscription."""
    await topic.ledger.open_cursor(cursor_name("b"))
    assert topic.subscription_names() == []
    assert topic.idle_cursors() == []
    with pytest.raises(NotAllowedError, match="reserved"):
        await topic.create_subscription(cursor_name("c"), topic.ledger.first_position)
