"""What the parts of a managed ledger share: the context it borrows from its
factory (LedgerContext) and OwningLedger, the
ledger as its cursors, writer and trimming see it. Those parts sit below
ledger.py, which builds them, so they know the ledger by this protocol only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from magnetar.broker.storage.api import (
    Clock,
    Entry,
    ManagedCursor,
    ManagedLedgerConfig,
    MetadataStore,
    Position,
)
from magnetar.broker.storage.births import Births
from magnetar.broker.storage.cache import EntryCacheManager
from magnetar.broker.storage.group import RoundWriter
from magnetar.broker.storage.handles import OpenFiles
from magnetar.broker.storage.index_file import IndexMaps
from magnetar.broker.storage.layout import LedgerInfo, LedgerLayout
from magnetar.broker.storage.metrics import LedgerStats
from magnetar.broker.storage.segment import LedgerFile

T = TypeVar("T")


class WriteHealth:
    """Whether appends succeed, across every ledger of one factory: set by the
    first failed group commit, cleared by the next one that succeeds."""

    __slots__ = ("failing", "failures", "last_error")

    def __init__(self) -> None:
        self.failing = False
        self.failures = 0
        self.last_error = ""

    def failed(self, error: str) -> None:
        self.failing = True
        self.failures += 1
        self.last_error = error

    def recovered(self) -> None:
        self.failing = False


WriteGuard = Callable[[], str | None]
"""Asked after a write, before its receipts resolve: None = confirm; a reason
= the process may have lost the right to write (cluster mode: its etcd
session), so the ledger is fenced and the writes fail instead."""


@dataclass(slots=True)
class LedgerContext:
    """What a managed ledger borrows from its factory."""

    data_dir: str
    executor: Executor
    cache: EntryCacheManager
    store: MetadataStore
    clock: Clock
    # A new ledger id greater than the argument (the ledger's newest id).
    allocate_ledger_id: Callable[[int], Awaitable[int]]
    on_closed: Callable[[OwningLedger], None]
    journal: RoundWriter
    files: OpenFiles
    write_health: WriteHealth = field(default_factory=WriteHealth)
    # Sealed ledgers' index files mapped at once (index_file.py).
    indexes: IndexMaps = field(default_factory=IndexMaps)
    write_guard: WriteGuard | None = None
    # New ledgers' files made through io_uring where it works (births.py).
    use_ring: bool = False
    # New ledgers whose files and first records are stored in batches.
    births: Births = field(init=False)

    def __post_init__(self) -> None:
        self.births = Births(self.executor, self.store, self.use_ring)


class OwningLedger(Protocol):
    """The managed ledger as its cursors, its writer and trimming use it."""

    meta_path: str
    dir: str
    layout: LedgerLayout
    stats: LedgerStats
    # Persisted mark-delete of every durable cursor, open or not.
    durable_mark_deletes: dict[str, Position]

    @property
    def name(self) -> str: ...
    @property
    def config(self) -> ManagedLedgerConfig: ...
    @property
    def ctx(self) -> LedgerContext: ...
    @property
    def is_closed(self) -> bool: ...
    @property
    def last_confirmed_position(self) -> Position: ...
    @property
    def first_position(self) -> Position: ...
    @property
    def total_size(self) -> int: ...
    @property
    def record_pending(self) -> bool: ...
    def hurry_birth(self) -> None: ...
    @property
    def has_active_cursors(self) -> bool: ...

    def next_position(self, position: Position) -> Position: ...
    def previous_position(self, position: Position) -> Position: ...
    def run_blocking(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]: ...
    def check_open(self) -> None: ...
    def entries_added(self, last: Position, count: int, nbytes: int) -> None: ...
    def cursor_activity(self, cursor: ManagedCursor, active: bool) -> None: ...
    def slowest_read(self) -> Position | None: ...
    def seal_later(self, info: LedgerInfo) -> None: ...
    def fence(self) -> None: ...
    def forget_unsynced(self, lf: LedgerFile) -> None: ...
    async def write_ledger_list(self) -> None: ...
    async def read_in_ledger(
        self,
        info: LedgerInfo,
        first: int,
        max_entries: int,
        max_bytes: int,
        at_least_one: bool = True,
    ) -> tuple[list[Entry], int]: ...
    async def read_positions(self, positions: Sequence[Position]) -> list[Entry]: ...
    async def wait_for_entries_after(
        self, position: Position, fut: asyncio.Future[None] | None = None
    ) -> None: ...
    def cursor_detached(self, cursor: ManagedCursor) -> None: ...
    async def new_ledger_file(self, ledger_id: int) -> LedgerFile: ...
    async def discard_files(self, files: list[LedgerFile]) -> None: ...
    def cursor_persisted(self, name: str, mark_delete: Position) -> None: ...
    def schedule_trim(self) -> None: ...
