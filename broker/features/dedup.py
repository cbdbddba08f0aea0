"""Message deduplication of one persistent topic (SEMANTICS 7, Pulsar's
MessageDeduplication).

Per producer name the topic keeps the highest sequence id *pushed* (accepted
for storage) and the highest *persisted* (durable). A SEND whose sequence id
is at or below the persisted one is a duplicate: answered with a receipt for
(-1, -1) and not stored. One above persisted but at or below pushed is still
in flight: the producer gets an error and resends later, when the answer is
certain. A batch counts by its highest sequence id; the chunks of one message
share a sequence id, so only its last chunk moves the counters.

The persisted map is snapshotted into the properties of a dedicated cursor
every `snapshot_interval` entries and on close, with the cursor's mark-delete
at the snapshot's entry; recovery reads the snapshot and replays the entries
after it. With a `deduplicationSnapshotInterval` (seconds) a timer also takes
one when that long has passed since the last and something was persisted
since (Pulsar's time-based takeSnapshot), so a quiet topic's replay after a
crash stays short however large the entry interval is. Producers idle for
`inactivity_seconds` are forgotten at a snapshot, so memory stays bounded by
the producers active in that window.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Callable, Collection

import structlog

from magnetar.broker.features.replicated import PREFIX as REPLICATOR_PREFIX
from magnetar.broker.storage.api import ManagedCursor, ManagedLedger, Position, StorageError
from magnetar.proto.errors import ProtocolError
from magnetar.proto.frames import Payload

log = structlog.get_logger(__name__)

CURSOR_NAME = "pulsar.dedup"
DUPLICATE = Position(-1, -1)
_REPLAY_BATCH = 1000


class DupStatus(enum.Enum):
    NEW = "new"
    DUPLICATE = "duplicate"
    # At or below pushed but above persisted: not known yet.
    UNKNOWN = "unknown"


class MessageDeduplication:
    def __init__(
        self,
        topic_name: str,
        ledger: ManagedLedger,
        *,
        snapshot_interval: int = 1000,
        inactivity_seconds: float = 6 * 3600.0,
        clock: Callable[[], float] = time.monotonic,
        connected: Callable[[], Collection[str]] = tuple,
    ) -> None:
        self.topic_name = topic_name
        self.ledger = ledger
        self.snapshot_interval = snapshot_interval
        self.inactivity_seconds = inactivity_seconds
        self._clock = clock
        # Names of the producers connected now: never forgotten while connected.
        self._connected = connected
        self.pushed: dict[str, int] = {}
        self.persisted: dict[str, int] = {}
        self._last_active: dict[str, float] = {}
        self._cursor: ManagedCursor | None = None
        self._since_snapshot = 0
        self._last_position: Position | None = None
        self.duplicates = 0
        # Time-based snapshots: the interval (0: none), when the last one was
        # taken (on `clock`), and the timer armed while enabled.
        self.snapshot_interval_s = 0.0
        self._last_snapshot = clock()
        self._timer: asyncio.TimerHandle | None = None
        # Waiting until a producer name has nothing in flight (settled()).
        self._settle_waiters: dict[str, list[asyncio.Future[None]]] = {}

    @property
    def is_enabled(self) -> bool:
        return self._cursor is not None

    # ---------------------------------------------------------- lifecycle

    async def enable(self) -> None:
        """Open (or create) the snapshot cursor and rebuild the maps from the
        snapshot plus every entry after it."""
        if self._cursor is not None:
            return
        cursor = await self.ledger.open_cursor(CURSOR_NAME)
        persisted = {name: int(seq) for name, seq in cursor.properties.items()}
        replayed = await self._replay(cursor, persisted)
        self.persisted = persisted
        self.pushed = dict(persisted)
        now = self._clock()
        self._last_active = dict.fromkeys(persisted, now)
        self._cursor = cursor
        self._last_snapshot = now
        self._arm_timer()
        log.info(
            "deduplication enabled",
            topic=self.topic_name,
            producers=len(persisted),
            replayed_entries=replayed,
        )

    async def _replay(self, cursor: ManagedCursor, persisted: dict[str, int]) -> int:
        cursor.rewind()
        replayed = 0
        while cursor.has_more_entries():
            entries = await cursor.read_entries(_REPLAY_BATCH)
            if not entries:
                break
            for entry in entries:
                replayed += 1
                self._last_position = entry.position
                try:
                    metadata = Payload.parse(entry.data, verify_checksum=False).metadata
                except ProtocolError:
                    continue  # stored before metadata was validated on publish
                if metadata.num_chunks_from_msg > 1 and (
                    metadata.chunk_id < metadata.num_chunks_from_msg - 1
                ):
                    continue
                # As on publish (Pulsar's rule): a batch counts by the highest
                # id it declares, else by its first.
                highest = max(metadata.highest_sequence_id, metadata.sequence_id)
                # A replicated entry counts for the replicator that stored it
                # (features/replicated.py), not for its original producer.
                source = metadata.replicated_from
                name = REPLICATOR_PREFIX + source if source else metadata.producer_name
                if highest > persisted.get(name, -1):
                    persisted[name] = highest
        return replayed

    @property
    def has_replicated(self) -> bool:
        """Whether a replicator's sequence ids are kept: then only unloading
        the topic may forget them (a policy turning deduplication off does
        not, or a replicator's resend after a crash would be stored twice)."""
        return any(name.startswith(REPLICATOR_PREFIX) for name in self.persisted)

    async def disable(self) -> None:
        """Forget everything and drop the snapshot cursor (it would hold back
        trimming)."""
        if self._cursor is None:
            return
        self._cursor = None
        self._cancel_timer()
        self.pushed.clear()
        self.persisted.clear()
        self._last_active.clear()
        try:
            await self.ledger.delete_cursor(CURSOR_NAME)
        except StorageError as exc:
            log.warning("deleting the dedup cursor failed", topic=self.topic_name, error=str(exc))
        log.info("deduplication disabled", topic=self.topic_name)

    def close(self) -> None:
        """Snapshot what is persisted; the ledger flushes the cursor on close."""
        self._cancel_timer()
        if self._cursor is not None:
            self._snapshot()

    # ------------------------------------------------- time-based snapshots

    def set_snapshot_interval_seconds(self, seconds: float) -> None:
        """The deduplicationSnapshotInterval policy (0: by entry count only)."""
        if seconds != self.snapshot_interval_s:
            self.snapshot_interval_s = seconds
            self._arm_timer()

    def snapshot_if_due(self) -> bool:
        """Snapshot when the interval has passed since the last snapshot and
        an entry was persisted since; whether one was taken."""
        cursor, position = self._cursor, self._last_position
        interval = self.snapshot_interval_s
        if cursor is None or position is None or interval <= 0:
            return False
        if self._clock() - self._last_snapshot < interval:
            return False
        if position <= cursor.mark_delete_position:
            return False  # nothing new: the last snapshot still holds
        self._snapshot()
        return True

    def _arm_timer(self) -> None:
        """(Re)arm the timer for when the next snapshot may be due; none
        while disabled or without an interval."""
        self._cancel_timer()
        interval = self.snapshot_interval_s
        if self._cursor is None or interval <= 0:
            return
        delay = self._last_snapshot + interval - self._clock()
        # Due already but nothing to snapshot: look again a whole interval on.
        if delay <= 0:
            delay = interval
        self._timer = asyncio.get_running_loop().call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self.snapshot_if_due()
        self._arm_timer()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # ------------------------------------------------------------ publish

    def check(self, producer_name: str, sequence_id: int, highest_sequence_id: int) -> DupStatus:
        """Classify a SEND; a NEW one counts as pushed from here on."""
        pushed = self.pushed.get(producer_name)
        if pushed is not None and sequence_id <= pushed:
            persisted = self.persisted.get(producer_name)
            if persisted is not None and sequence_id <= persisted:
                self.duplicates += 1
                return DupStatus.DUPLICATE
            return DupStatus.UNKNOWN
        self.pushed[producer_name] = max(sequence_id, highest_sequence_id)
        return DupStatus.NEW

    def persisted_entry(
        self, producer_name: str, highest_sequence_id: int, position: Position
    ) -> None:
        """An entry accepted by `check` is durable."""
        if highest_sequence_id > self.persisted.get(producer_name, -1):
            self.persisted[producer_name] = highest_sequence_id
        waiters = self._settle_waiters.pop(producer_name, None)
        for waiter in waiters or ():
            if not waiter.done():
                waiter.set_result(None)
        self._last_active[producer_name] = self._clock()
        if self._last_position is None or position > self._last_position:
            self._last_position = position
        self._since_snapshot += 1
        if self._since_snapshot >= self.snapshot_interval:
            self._snapshot()

    async def settled(self, producer_name: str) -> None:
        """Return once no append of `producer_name` is in flight (pushed past
        persisted): a replicator that connects again then learns where the
        remote really is, and resends nothing it would refuse as in flight.
        The caller bounds the wait (an append that fails never settles)."""
        while self.pushed.get(producer_name, -1) > self.persisted.get(producer_name, -1):
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._settle_waiters.setdefault(producer_name, []).append(waiter)
            await waiter

    def last_sequence_id(self, producer_name: str) -> int:
        """PRODUCER_SUCCESS.last_sequence_id: -1 for a name never persisted."""
        return self.persisted.get(producer_name, -1)

    def _snapshot(self) -> None:
        cursor, position = self._cursor, self._last_position
        if cursor is None or position is None:
            return
        self._forget_inactive()
        self._since_snapshot = 0
        if position <= cursor.mark_delete_position:
            return
        self._last_snapshot = self._clock()
        try:
            cursor.mark_delete(position, properties=self.persisted)
        except StorageError as exc:
            log.warning("dedup snapshot failed", topic=self.topic_name, error=str(exc))

    def _forget_inactive(self) -> None:
        deadline = self._clock() - self.inactivity_seconds
        connected = self._connected()
        idle = [
            name
            for name, seen in self._last_active.items()
            if seen < deadline and name not in connected
        ]
        for name in idle:
            # Pushed above persisted means a publish is in flight: keep it.
            if self.pushed.get(name) == self.persisted.get(name):
                self.pushed.pop(name, None)
                self.persisted.pop(name, None)
                del self._last_active[name]
