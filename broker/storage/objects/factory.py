"""ObjectManagedLedgerFactory: managed ledgers whose records are in a bucket.

The file factory's bookkeeping (ledger ids, the cache budget, trimming
sweeps, open and close) with the object journal in place of the file
journal, and ledgers opened by :func:`open_object_ledger`. The data
directory keeps only what the metadata store keeps there (the embedded
SQLite store of a standalone broker); no ledger data is written to it.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from concurrent.futures import ThreadPoolExecutor

from magnetar.broker.storage.api import (
    DEFAULT_CLOCK,
    Clock,
    ManagedLedgerConfig,
    MetadataStore,
)
from magnetar.broker.storage.context import WriteGuard
from magnetar.broker.storage.factory import FileManagedLedgerFactory, _lock_dir
from magnetar.broker.storage.ledger import ManagedLedgerImpl
from magnetar.broker.storage.metadata import SqliteMetadataStore
from magnetar.broker.storage.objects.collector import (
    DEFAULT_GRACE_S,
    DEFAULT_INTERVAL_S,
    RoundCollector,
)
from magnetar.broker.storage.objects.extents import extents_path, fence_path
from magnetar.broker.storage.objects.journal import (
    DEFAULT_MAX_IN_FLIGHT,
    DEFAULT_MAX_ROUND_BYTES,
    DEFAULT_ROUND_INTERVAL_S,
    ObjectJournal,
)
from magnetar.broker.storage.objects.ledger import open_object_ledger
from magnetar.broker.storage.objects.read_ahead import ReadAhead
from magnetar.broker.storage.objects.store import ObjectStore, ObjectStoreConfig


class ObjectManagedLedgerFactory(FileManagedLedgerFactory):
    """Construct with ``await ObjectManagedLedgerFactory.open_on(...)``."""

    objects: ObjectStore
    owner: str
    collector: RoundCollector
    read_ahead: ReadAhead

    @classmethod
    async def open_on(
        cls,
        objects_config: ObjectStoreConfig,
        data_dir: str,
        config: ManagedLedgerConfig | None = None,
        *,
        store: MetadataStore | None = None,
        clock: Clock = DEFAULT_CLOCK,
        trim_interval_s: float = 60.0,
        shared: bool = False,
        write_guard: WriteGuard | None = None,
        max_round_bytes: int = DEFAULT_MAX_ROUND_BYTES,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        round_interval_s: float = DEFAULT_ROUND_INTERVAL_S,
        collect_interval_s: float = DEFAULT_INTERVAL_S,
        collect_grace_s: float = DEFAULT_GRACE_S,
    ) -> ObjectManagedLedgerFactory:
        """Check the bucket (a missing one or refused credentials fail here,
        with one line saying which), then open. Without ``store`` an embedded
        SQLite store in ``data_dir`` is opened and owned; ``shared`` as for
        the file factory (cluster mode: no directory lock)."""
        objects = ObjectStore(objects_config)
        await objects.check()
        os.makedirs(data_dir, exist_ok=True)
        lock_fd = -1 if shared else await asyncio.to_thread(_lock_dir, data_dir)
        owns = store is None
        # Small: only the file engine's leftovers (sealing) would use it.
        executor = ThreadPoolExecutor(1, thread_name_prefix="magnetar-io")
        try:
            if store is None:
                store = await SqliteMetadataStore.open(os.path.join(data_dir, "metadata.db"))
            journal = ObjectJournal(
                objects,
                store,
                max_round_bytes=max_round_bytes,
                max_in_flight=max_in_flight,
                write_guard=write_guard,
                round_interval_s=round_interval_s,
                # No commit may name an object the collector could take.
                commit_deadline_s=collect_grace_s / 2,
            )
        except BaseException:
            executor.shutdown(wait=False)
            if lock_fd >= 0:
                os.close(lock_fd)
            if owns and store is not None:
                await store.close()
            raise
        factory = cls(
            data_dir,
            store,
            config or ManagedLedgerConfig(),
            clock,
            owns,
            lock_fd,
            trim_interval_s,
            executor,
            journal,
            write_guard,
        )
        factory.objects = objects
        factory.owner = uuid.uuid4().hex
        factory.read_ahead = ReadAhead()
        factory.collector = RoundCollector(
            objects, store, grace_s=collect_grace_s, interval_s=collect_interval_s
        )
        if collect_interval_s > 0:
            factory.collector.start()
        return factory

    async def close(self) -> None:
        await self.collector.close()
        await super().close()
        await self.read_ahead.close()  # after the ledgers: no read is left

    async def _open_ledger(self, name: str, config: ManagedLedgerConfig) -> ManagedLedgerImpl:
        return await open_object_ledger(
            self._ctx,
            name,
            config,
            self.objects,
            self.owner,
            self.read_ahead,
            self.collector.grace_s / 2,
        )

    async def _remove_closed(self, name: str) -> None:
        await self.store.delete_recursive(extents_path(name))
        await self.store.delete_recursive(fence_path(name))
