"""Opens the topic a name denotes (persistent or non-persistent by its
domain); the service never names a topic class."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from magnetar.broker.compaction.state import remove_compaction_files, view_path
from magnetar.broker.errors import BrokerServiceError
from magnetar.broker.storage.api import ManagedLedgerConfig, ManagedLedgerFactory, StorageError
from magnetar.broker.topics.base import Topic
from magnetar.broker.topics.non_persistent import NonPersistentTopic
from magnetar.broker.topics.persistent import PersistentTopic, ledger_name
from magnetar.proto.errors import ServerError
from magnetar.proto.naming import TopicName


@dataclass(frozen=True, slots=True)
class TopicSettings:
    ledger_config: ManagedLedgerConfig
    max_read_batch_size: int = 100
    key_shared_consistent_hashing: bool = False
    failover_consistent_hashing: bool = False
    allow_auto_subscription_creation: bool = True
    dedup_snapshot_interval: int = 1000
    dedup_inactivity_seconds: float = 6 * 3600.0
    # Where compacted views are kept (None: in memory only).
    compaction_dir: Path | None = None


async def topic_exists(name: TopicName, factory: ManagedLedgerFactory) -> bool:
    """Whether the topic has stored state (it was created before)."""
    return await factory.exists(ledger_name(name))


async def stored_topics(tenant: str, namespace: str, factory: ManagedLedgerFactory) -> list[str]:
    """The persistent topics of a namespace that have stored state, loaded or not."""
    prefix = f"{tenant}/{namespace}/persistent/"
    return [
        f"persistent://{tenant}/{namespace}/{name[len(prefix) :]}"
        for name in await factory.names(prefix)
    ]


async def delete_topic_data(
    name: TopicName, factory: ManagedLedgerFactory, compaction_dir: Path | None = None
) -> None:
    """Delete a (closed) topic's stored entries, cursors and compacted view."""
    if name.persistent and await factory.exists(ledger_name(name)):
        await factory.delete(ledger_name(name))
    if compaction_dir is not None:
        remove_compaction_files(view_path(compaction_dir, str(name)))


async def open_topic(
    name: TopicName,
    factory: ManagedLedgerFactory,
    settings: TopicSettings,
) -> Topic:
    if not name.persistent:
        return NonPersistentTopic(
            name, failover_consistent_hashing=settings.failover_consistent_hashing
        )
    try:
        ledger = await factory.open(ledger_name(name), settings.ledger_config)
    except StorageError as exc:
        raise BrokerServiceError(
            ServerError.ServiceNotReady, f"cannot open topic {name}: {exc}"
        ) from exc
    return PersistentTopic(
        name,
        ledger,
        max_read_batch_size=settings.max_read_batch_size,
        key_shared_consistent_hashing=settings.key_shared_consistent_hashing,
        failover_consistent_hashing=settings.failover_consistent_hashing,
        allow_auto_subscription_creation=settings.allow_auto_subscription_creation,
        dedup_snapshot_interval=settings.dedup_snapshot_interval,
        dedup_inactivity_seconds=settings.dedup_inactivity_seconds,
        compaction_dir=settings.compaction_dir,
    )
