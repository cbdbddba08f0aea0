"""Fixtures the broker unit tests share."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from magnetar.broker.storage import FileManagedLedgerFactory
from magnetar.broker.storage.api import ManagedLedgerConfig, SyncPolicy
from magnetar.broker.topics.persistent import PersistentTopic
from magnetar.proto.naming import TopicName


@pytest.fixture
async def topic(tmp_path: Path) -> AsyncIterator[PersistentTopic]:
    """A persistent topic "t" on real files (no fsync), closed afterwards."""
    factory = await FileManagedLedgerFactory.create(
        str(tmp_path), ManagedLedgerConfig(sync_policy=SyncPolicy.NONE)
    )
    ledger = await factory.open("public/default/persistent/t")
    topic = PersistentTopic(TopicName.parse("t"), ledger)
    try:
        yield topic
    finally:
        await topic.close(notify_clients=False)
        await factory.close()
