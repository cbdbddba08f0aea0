"""Open the embedded storage of a standalone broker under its data directory:
the SQLite metadata store and the file-based managed ledger factory."""

from __future__ import annotations

from magnetar.broker.config import BrokerConfig
from magnetar.broker.storage import FileManagedLedgerFactory, SqliteMetadataStore
from magnetar.broker.storage.api import (
    ManagedLedgerConfig,
    ManagedLedgerFactory,
    MetadataStore,
    SyncPolicy,
)
from magnetar.broker.storage.context import WriteGuard

METADATA_FILE = "metadata.db"


def ledger_config(config: BrokerConfig) -> ManagedLedgerConfig:
    return ManagedLedgerConfig(
        sync_policy=SyncPolicy(config.sync_policy),
        max_segment_size=config.managed_ledger_max_segment_size,
        max_entries_per_ledger=config.managed_ledger_max_entries_per_ledger,
        min_rollover_time_s=60.0 * config.managed_ledger_min_ledger_rollover_time_minutes,
        entry_cache_size=config.entry_cache_size,
        cache_eviction_threshold_s=config.entry_cache_eviction_threshold_seconds,
        io_uring_sync=config.journal_io_uring,
    )


async def open_factory(
    config: BrokerConfig,
    store: MetadataStore,
    *,
    shared: bool = False,
    write_guard: WriteGuard | None = None,
) -> FileManagedLedgerFactory:
    """The managed ledger factory the configuration names, on ``store``."""
    if config.storage == "object":
        # Imported here: the object store client is an optional extra.
        from magnetar.broker.storage.objects.factory import ObjectManagedLedgerFactory
        from magnetar.broker.storage.objects.store import ObjectStoreConfig

        factory: FileManagedLedgerFactory = await ObjectManagedLedgerFactory.open_on(
            ObjectStoreConfig(
                config.object_store_url,
                endpoint=config.object_store_endpoint or None,
                region=config.object_store_region or None,
            ),
            str(config.data_dir),
            ledger_config(config),
            store=store,
            shared=shared,
            write_guard=write_guard,
            max_round_bytes=config.object_store_max_round_bytes,
            max_in_flight=config.object_store_max_rounds_in_flight,
            round_interval_s=config.object_store_round_interval_ms / 1000,
            collect_interval_s=config.object_store_collect_interval_s,
            collect_grace_s=config.object_store_collect_grace_s,
        )
    else:
        factory = await FileManagedLedgerFactory.create(
            str(config.data_dir),
            ledger_config(config),
            store=store,
            shared=shared,
            write_guard=write_guard,
        )
    try:
        await factory.reserve_ledger_ids()
    except BaseException:
        await factory.close()
        raise
    return factory


async def open_storage(config: BrokerConfig) -> tuple[ManagedLedgerFactory, MetadataStore]:
    """The factory and the metadata store; the caller closes both (factory first)."""
    data_dir = config.data_dir
    data_dir.mkdir(parents=True, exist_ok=True)
    store = await SqliteMetadataStore.open(str(data_dir / METADATA_FILE))
    try:
        factory = await open_factory(config, store)
    except BaseException:
        await store.close()
        raise
    return factory, store
