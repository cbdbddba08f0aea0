"""FileManagedLedgerFactory: one data directory, its ledgers and shared resources.

It owns the I/O thread pool, the entry cache budget, the ledger id counter (in
the metadata store) and an exclusive lock on the directory, so two processes
never write the same ledgers.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import unquote

import structlog

from magnetar.broker.storage.api import (
    DEFAULT_CLOCK,
    BadVersion,
    Clock,
    ManagedLedger,
    ManagedLedgerClosed,
    ManagedLedgerConfig,
    ManagedLedgerFactory,
    MetadataStore,
    StorageError,
)
from magnetar.broker.storage.cache import EntryCacheManager
from magnetar.broker.storage.context import LedgerContext, OwningLedger, WriteGuard
from magnetar.broker.storage.group import RoundWriter
from magnetar.broker.storage.handles import OpenFiles, capacity_for_limit
from magnetar.broker.storage.journal import Journal
from magnetar.broker.storage.ledger import ManagedLedgerImpl
from magnetar.broker.storage.metadata import SqliteMetadataStore
from magnetar.broker.storage.paths import ML_ROOT, ledger_dir, ledger_meta_path
from magnetar.broker.storage.recovery import open_ledger
from magnetar.broker.storage.replay import replay_journals
from magnetar.broker.storage.trim import remove_tree

log = structlog.get_logger(__name__)

LEDGER_ID_PATH = "/storage/next-ledger-id"
# Ids reserved at a time; ids of a block unused at exit are skipped, never reused.
LEDGER_ID_BLOCK = 1024


class FileManagedLedgerFactory(ManagedLedgerFactory):
    """Construct with ``await FileManagedLedgerFactory.create(data_dir, config)``."""

    def __init__(
        self,
        data_dir: str,
        store: MetadataStore,
        config: ManagedLedgerConfig,
        clock: Clock,
        owns_store: bool,
        lock_fd: int,
        trim_interval_s: float,
        executor: ThreadPoolExecutor,
        journal: RoundWriter,
        write_guard: WriteGuard | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.store = store
        self.config = config
        self._owns_store = owns_store
        self._lock_fd = lock_fd
        self._executor = executor
        self.journal = journal
        self.cache = EntryCacheManager(config.entry_cache_size, config.cache_eviction_threshold_s)
        self._ctx = LedgerContext(
            data_dir=data_dir,
            executor=self._executor,
            cache=self.cache,
            store=store,
            clock=clock,
            allocate_ledger_id=self._allocate_ledger_id,
            on_closed=self._ledger_closed,
            journal=journal,
            files=journal.files,
            write_guard=write_guard,
            use_ring=config.io_uring_sync,
        )
        self._ledgers: dict[str, ManagedLedgerImpl] = {}
        self._opening: dict[str, asyncio.Future[ManagedLedgerImpl]] = {}
        self._id_lock = asyncio.Lock()
        self._next_id = 0
        self._id_limit = 0
        self._closed = False
        # Time-based retention needs trimming without any activity: a sweep.
        self._trim_interval_s = trim_interval_s
        self._sweeper: asyncio.Task[None] | None = None
        if trim_interval_s > 0:
            self._sweeper = asyncio.get_running_loop().create_task(
                self._sweep_loop(), name="ml-factory-trim-sweep"
            )
        # Idle ledgers' cached entries age out without an append to push them.
        self._evictor = asyncio.get_running_loop().create_task(
            self._evict_loop(), name="ml-factory-cache-eviction"
        )

    @classmethod
    async def create(
        cls,
        data_dir: str,
        config: ManagedLedgerConfig | None = None,
        *,
        store: MetadataStore | None = None,
        clock: Clock = DEFAULT_CLOCK,
        io_threads: int = 4,
        trim_interval_s: float = 60.0,
        shared: bool = False,
        write_guard: WriteGuard | None = None,
        max_open_files: int | None = None,
    ) -> FileManagedLedgerFactory:
        """Lock ``data_dir`` and open (or create) it.

        Without ``store``, an embedded SQLite store at ``<data_dir>/metadata.db``
        is opened and owned (closed with the factory). Every ``trim_interval_s``
        (0: never) each open ledger trims what retention no longer keeps.
        ``shared`` (cluster mode): several processes use the directory, each
        writing only the ledgers it owns, so it is not locked; ``write_guard``
        then says whether a write may still be confirmed (ledger.py).
        ``max_open_files`` bounds the ledger files kept open (default: from
        the descriptor limit, handles.py).
        """
        os.makedirs(os.path.join(data_dir, "ledgers"), exist_ok=True)
        lock_fd = -1 if shared else await asyncio.to_thread(_lock_dir, data_dir)
        owns = store is None
        executor = ThreadPoolExecutor(io_threads, thread_name_prefix="magnetar-io")
        try:
            if store is None:
                store = await SqliteMetadataStore.open(os.path.join(data_dir, "metadata.db"))
            try:
                await replay_journals(data_dir, store, executor)
                cfg = config or ManagedLedgerConfig()
                files = OpenFiles(
                    capacity_for_limit() if max_open_files is None else max_open_files
                )
                log.info("ledger files kept open at most", capacity=files.capacity)
                journal = await Journal.open(
                    data_dir,
                    executor,
                    files,
                    sync_interval_s=cfg.sync_interval_ms / 1000,
                    write_guard=write_guard,
                    use_ring=cfg.io_uring_sync,
                )
            except BaseException:
                if owns:
                    await store.close()
                raise
        except BaseException:
            executor.shutdown(wait=False)
            if lock_fd >= 0:
                os.close(lock_fd)
            raise
        return cls(
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

    async def open(self, name: str, config: ManagedLedgerConfig | None = None) -> ManagedLedger:
        return await self.open_impl(name, config)

    async def open_impl(
        self, name: str, config: ManagedLedgerConfig | None = None
    ) -> ManagedLedgerImpl:
        """:meth:`open` with the concrete type (tests, benchmarks)."""
        self._check_open()
        _validate_name(name)
        ml = self._ledgers.get(name)
        if ml is not None:
            return ml
        pending = self._opening.get(name)
        if pending is not None:
            return await asyncio.shield(pending)
        fut: asyncio.Future[ManagedLedgerImpl] = asyncio.get_running_loop().create_future()
        self._opening[name] = fut
        try:
            ml = await self._open_ledger(name, config or self.config)
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()
            raise
        finally:
            del self._opening[name]
        self._ledgers[name] = ml
        fut.set_result(ml)
        return ml

    async def delete(self, name: str) -> None:
        self._check_open()
        _validate_name(name)
        ml = self._ledgers.get(name)
        if ml is not None:
            await ml.delete()
            return
        await self.store.delete_recursive(ledger_meta_path(name))
        await self._remove_closed(name)

    async def exists(self, name: str) -> bool:
        self._check_open()
        _validate_name(name)
        return await self.store.exists(ledger_meta_path(name))

    async def names(self, prefix: str = "") -> list[str]:
        self._check_open()
        # One metadata node per ledger, its name quoted whole (ledger_meta_path).
        stored = [unquote(child) for child in await self.store.get_children(ML_ROOT)]
        return sorted(name for name in stored if name.startswith(prefix))

    @property
    def file_journal(self) -> Journal:
        """The journal, as the file engine's (tests look into its files)."""
        assert isinstance(self.journal, Journal), "not on files"
        return self.journal

    @property
    def write_error(self) -> str | None:
        health = self._ctx.write_health
        return health.last_error if health.failing else None

    @property
    def cache_used_bytes(self) -> int:
        return self.cache.size

    @property
    def open_ledgers(self) -> dict[str, ManagedLedgerImpl]:
        return dict(self._ledgers)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for task in (self._sweeper, self._evictor):
            if task is not None:
                task.cancel()
                await asyncio.wait([task])
        for ml in list(self._ledgers.values()):
            try:
                await ml.close()
            except StorageError:
                log.exception("closing a managed ledger failed", ledger=ml.name)
        await self._ctx.births.close()
        await self.journal.close()
        await asyncio.to_thread(self._executor.shutdown, True)
        if self._owns_store:
            await self.store.close()
        if self._lock_fd >= 0:
            os.close(self._lock_fd)

    # -------------------------------------------------------------------- internals

    async def _open_ledger(self, name: str, config: ManagedLedgerConfig) -> ManagedLedgerImpl:
        return await open_ledger(self._ctx, name, config)

    async def _remove_closed(self, name: str) -> None:
        """A deleted managed ledger's files, when it is not open."""
        await asyncio.get_running_loop().run_in_executor(
            self._executor, remove_tree, ledger_dir(self.data_dir, name)
        )

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(self._trim_interval_s)
            for ml in list(self._ledgers.values()):
                ml.schedule_trim()

    async def _evict_loop(self) -> None:
        cache = self.cache
        while True:
            await asyncio.sleep(cache.sweep_interval())
            cache.evict()

    def _check_open(self) -> None:
        if self._closed:
            raise ManagedLedgerClosed("managed ledger factory is closed")

    def _ledger_closed(self, ml: OwningLedger) -> None:
        if self._ledgers.get(ml.name) is ml:
            del self._ledgers[ml.name]

    async def _allocate_ledger_id(self, after: int = -1) -> int:
        """A new ledger id above ``after``: from a block reserved in the
        metadata store (one compare-and-set per LEDGER_ID_BLOCK ids, not one
        commit per topic). Ids must grow within a managed ledger: one whose
        newest id came from another broker's later block makes this broker
        reserve a fresh block, which lies above every id handed out."""
        if self._next_id <= after:
            self._id_limit = self._next_id  # drop the rest of the block
        if self._next_id < self._id_limit:
            self._next_id += 1
            return self._next_id - 1
        async with self._id_lock:
            await self._reserve_ids(after)
            self._next_id += 1
            return self._next_id - 1

    async def reserve_ledger_ids(self) -> None:
        """Reserve the first block of ledger ids (at start): otherwise the
        first topic created waited for that metadata commit (1 of its 1.4 ms,
        issue 43)."""
        async with self._id_lock:
            await self._reserve_ids(-1)

    async def _reserve_ids(self, after: int) -> None:
        while self._next_id >= self._id_limit or self._next_id <= after:
            got = await self.store.get(LEDGER_ID_PATH)
            current = int(got.value) if got is not None and got.value else 1
            version = got.stat.version if got is not None else -1
            limit = current + LEDGER_ID_BLOCK
            try:
                await self.store.put(LEDGER_ID_PATH, str(limit).encode(), version)
            except BadVersion:
                continue  # another process reserved a block; read again
            self._next_id, self._id_limit = current, limit


def _validate_name(name: str) -> None:
    if not name or name.startswith("/") or name.endswith("/") or "//" in name:
        raise ValueError(f"invalid managed ledger name {name!r}")


def _lock_dir(data_dir: str) -> int:
    fd = os.open(os.path.join(data_dir, "LOCK"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as exc:
        os.close(fd)
        raise StorageError(f"data directory {data_dir} is in use by another process") from exc
    return fd
