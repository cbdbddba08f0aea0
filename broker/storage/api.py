"""Public types and interfaces of the broker's storage layer.

The broker codes against this module only. Storage stores opaque bytes and never
parses message metadata: a search over entries takes the broker's predicate.

Vocabulary follows Apache Pulsar:

* A *managed ledger* is one persistent topic's log: a sequence of *ledgers*
  (append-only segment files), each a sequence of *entries*. An entry is one
  SEND payload (one message or one batch), stored and returned byte for byte.
* A :class:`Position` is ``(ledger_id, entry_id)``. Entry ids start at 0 in every
  ledger and grow by 1; ledger ids are unique per data directory and grow.
* A *managed cursor* is one subscription's (or reader's) view: a read position,
  a mark-delete position (everything at or before it is acked), the
  individually deleted positions after it, per-entry batch-index ack sets and
  string->int properties. Durable cursors survive restarts; non-durable ones
  live in memory.
* The :class:`MetadataStore` is a small ZooKeeper-shaped key/value tree.

Implementations: ``FileManagedLedgerFactory`` (``factory.py``) and
``SqliteMetadataStore`` (``metadata.py``), re-exported by ``magnetar.broker.storage``.

Concurrency: every method must be called from the event loop thread that opened
the object. Blocking work runs on worker threads (the journal's fsync: io_uring).
"""

from __future__ import annotations

import asyncio
import enum
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from magnetar.broker.storage.errors import (
    BadVersion as BadVersion,
    ConcurrentReadError as ConcurrentReadError,
    CursorAlreadyExists as CursorAlreadyExists,
    CursorClosed as CursorClosed,
    InvalidPosition as InvalidPosition,
    ManagedLedgerClosed as ManagedLedgerClosed,
    ManagedLedgerFenced as ManagedLedgerFenced,
    MetadataError as MetadataError,
    MetadataStoreClosed as MetadataStoreClosed,
    NotEmpty as NotEmpty,
    NotFound as NotFound,
    StorageError as StorageError,
)
from magnetar.broker.storage.metadata_api import (
    GetResult as GetResult,
    MetadataStore as MetadataStore,
    Notification as Notification,
    NotificationListener as NotificationListener,
    NotificationType as NotificationType,
    Stat as Stat,
    validate_path as validate_path,
)

_MAX_ID = (1 << 63) - 1

# Pulsar's storage write latency thresholds (0.5 ms ... 1 s), in seconds: the
# buckets of WriteStats.write_latency_counts.
WRITE_LATENCY_BOUNDS = (0.0005, 0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 1.0)


class Position(NamedTuple):
    """An entry's address in a managed ledger, ordered by (ledger_id, entry_id).

    A NamedTuple so that comparison, hashing and creation run at C speed on the
    hot path. ``Position(l, -1)`` means "before the first entry of ledger l" and is
    a valid mark-delete position. :data:`EARLIEST` and :data:`LATEST` are Pulsar's
    sentinels ``(-1, -1)`` and ``(2**63-1, 2**63-1)``; they are accepted where a
    start position is asked for.
    """

    ledger_id: int
    entry_id: int

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}"


EARLIEST = Position(-1, -1)
LATEST = Position(_MAX_ID, _MAX_ID)


class Entry(NamedTuple):
    """One stored entry: the bytes given to ``add_entry``, returned unchanged."""

    position: Position
    data: bytes
    # Messages in the entry (1, or the batch size); used for permits and backlog.
    num_messages: int = 1


class InitialPosition(enum.Enum):
    """Where a newly created durable cursor starts (Pulsar's InitialPosition)."""

    LATEST = "latest"
    EARLIEST = "earliest"


class SyncPolicy(enum.Enum):
    """When appended bytes reach the disk.

    * ``FSYNC``: an ``add_entry`` resolves only after its group is fsynced.
    * ``INTERVAL``: resolves after the write; fsync every ``sync_interval_ms``.
    * ``NONE``: resolves after the write; the OS decides when to flush.
    """

    FSYNC = "fsync"
    INTERVAL = "interval"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class ManagedLedgerConfig:
    """Settings of a managed ledger (and, for the cache budget, of the factory).

    ``entry_cache_size`` is read from the factory's config only: the entry cache
    budget is shared by every ledger the factory opens. Retention follows Pulsar:
    a ledger that every durable cursor has consumed is deleted once it is older
    than ``retention_time_s`` *or* the consumed ledgers exceed
    ``retention_size_bytes``; a negative value means "no limit" for that dimension
    (both negative: keep everything); 0/0 (default) keeps nothing consumed.
    """

    sync_policy: SyncPolicy = SyncPolicy.FSYNC
    sync_interval_ms: int = 100
    max_segment_size: int = 64 * 1024 * 1024
    # Also at this many entries once this old (Pulsar's
    # managedLedgerMaxEntriesPerLedger and MinLedgerRolloverTimeMinutes).
    max_entries_per_ledger: int = 10_000
    min_rollover_time_s: float = 600.0
    entry_cache_size: int = 128 * 1024 * 1024
    cache_eviction_threshold_s: float = 1.0  # factory's config only, as the size
    io_uring_sync: bool = True  # factory's: the journal syncs through uring.py
    retention_time_s: float = 0.0
    retention_size_bytes: int = 0
    cursor_persist_interval_s: float = 1.0
    max_persisted_unacked_ranges: int = 10_000
    # Bound on one read from disk, whatever max_bytes the caller asks for.
    max_read_bytes: int = 8 * 1024 * 1024

    def __post_init__(self) -> None:
        if self.sync_interval_ms <= 0:
            raise ValueError("sync_interval_ms must be > 0")
        if self.max_segment_size < 1024:
            raise ValueError("max_segment_size must be >= 1024")
        if self.max_entries_per_ledger < 1:
            raise ValueError("max_entries_per_ledger must be >= 1")
        if self.min_rollover_time_s < 0:
            raise ValueError("min_rollover_time_s must be >= 0")
        if self.entry_cache_size < 0:
            raise ValueError("entry_cache_size must be >= 0")
        if not self.cache_eviction_threshold_s > 0:
            raise ValueError("cache_eviction_threshold_s must be > 0")
        if self.cursor_persist_interval_s < 0:
            raise ValueError("cursor_persist_interval_s must be >= 0")
        if self.max_persisted_unacked_ranges < 0:
            raise ValueError("max_persisted_unacked_ranges must be >= 0")
        if self.max_read_bytes <= 0:
            raise ValueError("max_read_bytes must be > 0")


@dataclass(frozen=True, slots=True)
class LedgerSummary:
    """One stored ledger (Pulsar's LedgerInfo); closed_at: its rollover time, None if current."""

    ledger_id: int
    entries: int
    size: int  # the bytes of its records
    closed_at: float | None = None  # wall-clock seconds


@dataclass(frozen=True, slots=True)
class WriteStats:
    """What a managed ledger wrote since it was opened, for metrics."""

    entries_written: int
    bytes_written: int
    # Group commits per WRITE_LATENCY_BOUNDS bucket, then the overflow; not
    # cumulative. Latency: from the group's oldest entry queued to durable.
    write_latency_counts: tuple[int, ...]
    write_latency_sum: float


Clock = Callable[[], float]
"""Wall-clock seconds (``time.time`` by default); injected for retention tests."""

DEFAULT_CLOCK: Clock = time.time


# ----------------------------------------------------------------------- ledger API


EntryPredicate = Callable[[Entry], bool]


class ManagedCursor(ABC):
    """A subscription's (durable) or reader's (non-durable) position in a ledger.

    Positions after the mark-delete position are "individually deleted" (acked)
    or not; reading skips deleted ones. Mark-delete advances by itself when the
    gap right after it closes (SEM-3.1). Acks are in memory at once; durable
    cursors persist their state at most once per ``cursor_persist_interval_s`` and
    on close/flush, with at most ``max_persisted_unacked_ranges`` ranges (later
    ranges come back as unacked after a crash or restart, never the reverse).
    """

    @property
    @abstractmethod
    def name(self) -> str: ...

    @property
    @abstractmethod
    def is_durable(self) -> bool: ...

    @property
    @abstractmethod
    def is_active(self) -> bool:
        """A consumer reads through this cursor now (see :meth:`set_active`)."""

    @abstractmethod
    def set_active(self) -> None:
        """A consumer is attached. The ledger caches the entries it writes only
        while some cursor is active (Pulsar's ManagedCursor.setActive): with
        nobody reading, keeping them would only cost memory."""

    @abstractmethod
    def set_inactive(self) -> None:
        """The last consumer left (also implied by close). When no cursor of
        the ledger stays active, its cached entries are dropped."""

    @property
    @abstractmethod
    def read_position(self) -> Position:
        """The next position a read will consider (it may not exist yet)."""

    @property
    @abstractmethod
    def mark_delete_position(self) -> Position:
        """Everything at or before this position is acked."""

    @property
    @abstractmethod
    def properties(self) -> Mapping[str, int]:
        """Properties given with the latest effective ``mark_delete``."""

    @abstractmethod
    async def read_entries(self, max_entries: int, max_bytes: int = 5 * 1024 * 1024) -> list[Entry]:
        """Read from the read position, skipping deleted entries; advance past them.

        Returns [] when nothing is available. Returns at least one entry when one
        is available, even above ``max_bytes`` (which counts each entry as its
        data plus a 12-byte record header). One read at a time per cursor
        (:class:`ConcurrentReadError`). A ``seek``/``rewind`` during the read
        wins: the read position is then not advanced by this read.
        """

    @abstractmethod
    async def read_entries_or_wait(
        self, max_entries: int, max_bytes: int = 5 * 1024 * 1024
    ) -> list[Entry]:
        """Like :meth:`read_entries` but waits until at least one entry is there.

        Cancel-safe: cancelling while waiting leaves the cursor unchanged.
        Raises ManagedLedgerClosed / CursorClosed if closed while waiting.
        """

    @abstractmethod
    def has_more_entries(self) -> bool:
        """True if an entry exists at or after the read position (deleted or not)."""

    @abstractmethod
    def mark_delete(self, position: Position, properties: Mapping[str, int] | None = None) -> None:
        """Cumulative ack: everything up to and including ``position`` is acked.

        A position before the current mark-delete position is ignored; a position
        after the last entry raises :class:`InvalidPosition`. Ranges and ack sets at
        or before the new position are dropped. ``properties`` (when given)
        replace the stored properties.
        """

    @abstractmethod
    def delete(self, positions: Iterable[Position]) -> None:
        """Individual acks of whole entries (SEM-3.1). Already acked ones: no-op."""

    @abstractmethod
    def delete_batch_indexes(self, position: Position, ack_set: Sequence[int]) -> None:
        """Batch-index ack of some messages of one entry (SEM-3.3).

        ``ack_set`` is Pulsar's wire form: a BitSet as int64 words (signed or not,
        little-endian word order) whose set bits are the indexes STILL UNACKED.
        It is ANDed with the stored set; when no bit remains the entry is deleted
        as by :meth:`delete`.
        """

    @abstractmethod
    def is_deleted(self, position: Position) -> bool:
        """True if the whole entry is acked (at/before mark-delete, or deleted)."""

    @abstractmethod
    def get_batch_ack_set(self, position: Position) -> list[int] | None:
        """The stored still-unacked bitset (signed int64 words) or None if none."""

    @abstractmethod
    def rewind(self) -> None:
        """Read position = first not-deleted position after mark-delete (SEM-5.3)."""

    @abstractmethod
    def seek(self, position: Position) -> None:
        """Set the read position (never at or before mark-delete: clamped after it)."""

    @abstractmethod
    async def reset_cursor(self, position: Position) -> None:
        """Subscription seek: forget every ack; mark-delete = the position before
        ``position``; read position = ``position``. Persisted before returning
        (durable). :data:`EARLIEST` / :data:`LATEST` are accepted.
        """

    @abstractmethod
    async def find_newest_matching(
        self, predicate: EntryPredicate, *, from_first_entry: bool = False
    ) -> Position | None:
        """Binary search for the newest entry matching a monotone predicate.

        ``predicate`` must be true for a prefix of the entries and false after
        (e.g. ``publish_time <= t``). The search covers the entries after
        mark-delete, or every stored entry with ``from_first_entry``. Returns
        None if no entry matches. Reset by publish time:
        ``p = await find_newest_matching(lambda e: publish_time(e) <= t)`` then
        ``reset_cursor(next_position(p))`` (or the first position if None).
        """

    @property
    @abstractmethod
    def backlog_entries(self) -> int:
        """Entries after mark-delete, not individually deleted. O(1)."""

    @property
    @abstractmethod
    def backlog_messages(self) -> int:
        """Messages (sum of num_messages) of the backlog entries. O(1)."""

    @abstractmethod
    async def flush(self) -> None:
        """Persist the cursor state now if it changed (durable cursors)."""

    @abstractmethod
    async def close(self) -> None:
        """Persist (durable) and detach from the ledger. Idempotent."""


class ManagedLedger(ABC):
    """One topic's append-only log plus its cursors."""

    @property
    @abstractmethod
    def name(self) -> str: ...

    @property
    @abstractmethod
    def config(self) -> ManagedLedgerConfig: ...

    @property
    @abstractmethod
    def is_closed(self) -> bool: ...

    @abstractmethod
    def add_entry(self, data: bytes, num_messages: int = 1) -> asyncio.Future[Position]:
        """Append one entry; await the result for its position once it is durable
        per the sync policy.

        Not a coroutine: the entry is queued when called, so positions follow
        call order even if the awaits run later (and no coroutine frame is paid
        per entry). Group-committed: appends that arrive while a write is in
        flight go into the next write; receipts resolve in append order.
        Cancelling the await does not withdraw the entry. Raises (at call time)
        ManagedLedgerClosed after close, ManagedLedgerFenced after an
        unrecoverable write error; a failed write fails the awaitable with
        StorageError.
        """

    @abstractmethod
    def set_entries_listener(self, listener: Callable[[int, int], None] | None) -> None:
        """``listener(entries, bytes)`` is called once per group commit, as soon as
        its entries are readable and before their awaitables complete (the
        topic wakes its dispatchers so, without a callback per entry)."""

    @abstractmethod
    async def read_entries(
        self, start: Position, max_entries: int, max_bytes: int = 5 * 1024 * 1024
    ) -> list[Entry]:
        """Entries from ``start`` (inclusive) onward, across ledgers, in order.

        Positions in deleted (trimmed) ledgers are skipped. Returns [] when
        nothing at/after start exists; at least one entry when one does.
        ``max_bytes`` counts each entry as its data plus a 12-byte header.
        """

    @abstractmethod
    async def read_positions(self, positions: Sequence[Position]) -> list[Entry]:
        """Entries at exactly these positions, in the given order (for redelivery).

        Positions that do not exist (trimmed, or not yet written) are left out.
        """

    @abstractmethod
    async def wait_for_entries_after(self, position: Position) -> None:
        """Return once an entry after ``position`` exists (at once if one does).

        Cancel-safe. Raises ManagedLedgerClosed if the ledger closes first.
        """

    @property
    @abstractmethod
    def last_confirmed_position(self) -> Position:
        """The newest entry's position (for GET_LAST_MESSAGE_ID).

        ``Position(current_ledger_id, -1)`` when the ledger holds no entry.
        """

    @property
    @abstractmethod
    def first_position(self) -> Position:
        """The oldest stored entry's position (or where the next one will go)."""

    @abstractmethod
    def next_position(self, position: Position) -> Position:
        """The position right after ``position``, following ledger boundaries."""

    @abstractmethod
    def previous_position(self, position: Position) -> Position:
        """The position right before ``position`` (``(l, -1)`` at a ledger start)."""

    @property
    @abstractmethod
    def number_of_entries(self) -> int:
        """Stored entries (not yet trimmed)."""

    @property
    @abstractmethod
    def number_of_messages(self) -> int:
        """Sum of num_messages of the stored entries."""

    @property
    @abstractmethod
    def total_size(self) -> int:
        """Bytes of entry data stored (not counting record headers)."""

    @abstractmethod
    def ledger_summaries(self) -> list[LedgerSummary]:
        """The stored ledgers, oldest first (internal stats)."""

    @abstractmethod
    def write_stats(self) -> WriteStats:
        """Counters of what was written, read at stats update and scrape time."""

    @abstractmethod
    async def open_cursor(
        self,
        name: str,
        initial_position: InitialPosition = InitialPosition.LATEST,
        properties: Mapping[str, int] | None = None,
    ) -> ManagedCursor:
        """Open (create if needed) the durable cursor ``name``.

        An existing cursor keeps its state; ``initial_position`` and
        ``properties`` apply only on creation. Returns the same object while open.
        """

    @abstractmethod
    def new_non_durable_cursor(
        self, start: Position, *, inclusive: bool = False, name: str | None = None
    ) -> ManagedCursor:
        """A cursor in memory reading from ``start`` (or just after it).

        :data:`EARLIEST` / :data:`LATEST` are accepted (LATEST: only new entries).
        Non-durable cursors never hold back trimming.
        """

    @abstractmethod
    async def delete_cursor(self, name: str) -> None:
        """Close and forget a cursor (durable: its stored state too). No-op if absent."""

    @property
    @abstractmethod
    def cursors(self) -> Sequence[ManagedCursor]:
        """The open cursors, durable and non-durable."""

    @abstractmethod
    def get_cursor(self, name: str) -> ManagedCursor | None: ...

    @abstractmethod
    def set_retention(self, time_s: float, size_bytes: int) -> None:
        """Change this ledger's retention (a namespace retention policy); takes
        effect at the next trim."""

    @abstractmethod
    async def trim_consumed_ledgers(self) -> int:
        """Delete whole ledgers no durable cursor needs and retention allows
        (also after acks and rollovers); returns how many."""

    @abstractmethod
    async def wait_first_record(self) -> None:
        """Until a new ledger's record is stored; then it survives a crash."""

    @abstractmethod
    async def close(self) -> None:
        """Idempotent. Fails queued appends and waiters with ManagedLedgerClosed,
        lets the write in flight finish, persists cursors, syncs and closes files.
        """

    @abstractmethod
    async def delete(self) -> None:
        """Close, then delete every file and metadata record of this ledger."""


class ManagedLedgerFactory(ABC):
    """Opens managed ledgers of one data directory and shares their resources
    (I/O threads, entry cache budget, ledger id allocation, metadata store).
    """

    @property
    @abstractmethod
    def write_error(self) -> str | None:
        """While appends keep failing (disk full, I/O error): the last failure;
        None once an append succeeded again, or if none ever failed."""

    @property
    @abstractmethod
    def cache_used_bytes(self) -> int:
        """Memory the entry cache holds now, data plus per-entry objects (only
        ledgers with an active cursor add to it)."""

    @abstractmethod
    async def open(self, name: str, config: ManagedLedgerConfig | None = None) -> ManagedLedger:
        """Open (create if needed) a managed ledger; the same object while open.

        ``name`` is a ``/``-separated path such as
        ``public/default/persistent/my-topic``.
        """

    @abstractmethod
    async def delete(self, name: str) -> None:
        """Delete a managed ledger (open or not) with all its data. No-op if absent."""

    @abstractmethod
    async def exists(self, name: str) -> bool: ...

    @abstractmethod
    async def names(self, prefix: str = "") -> list[str]:
        """The names of the stored ledgers (open or not) that start with
        `prefix`, sorted: how a broker finds topics it has not loaded."""

    @abstractmethod
    async def close(self) -> None:
        """Close every open ledger; idempotent."""


__all__ = [
    "DEFAULT_CLOCK",
    "EARLIEST",
    "LATEST",
    "WRITE_LATENCY_BOUNDS",
    "BadVersion",
    "Clock",
    "ConcurrentReadError",
    "CursorAlreadyExists",
    "CursorClosed",
    "Entry",
    "EntryPredicate",
    "GetResult",
    "InitialPosition",
    "InvalidPosition",
    "LedgerSummary",
    "ManagedCursor",
    "ManagedLedger",
    "ManagedLedgerClosed",
    "ManagedLedgerConfig",
    "ManagedLedgerFactory",
    "ManagedLedgerFenced",
    "MetadataError",
    "MetadataStore",
    "MetadataStoreClosed",
    "NotEmpty",
    "NotFound",
    "Notification",
    "NotificationListener",
    "NotificationType",
    "Position",
    "Stat",
    "StorageError",
    "SyncPolicy",
    "WriteStats",
    "validate_path",
]
