"""ObjectJournal: the broker's group commit onto an object store.

The same contract as the file journal (journal.py) towards the ledgers'
writers: they schedule themselves, a round takes one group from each. Here
a round's records, every ledger's group one after the other, become ONE
object (a PUT instead of a write and an fdatasync), then each group's extent
(which entries, where in the object) is committed to the metadata store
under its ledger's fence, then the receipts go out. A round's cost thus
stays one PUT whatever the number of topics.

Rounds pipeline: up to ``max_in_flight`` are written at once (a ledger has at
most one group in flight, so its groups still commit in order). A PUT or a
commit that fails for a reason that may pass (the store down, slow, or the
metadata store unreachable) is retried with backoff until it succeeds or the
journal closes; producers meanwhile see their own send timeouts, and no
receipt is ever given for data that is not stored. A commit refused by a
fence (another broker took the topic) fails that ledger's group for good.

Objects a crash leaves without a committed extent are garbage for the
collector (not yet: README "Object storage" says what is left).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable

import structlog

from magnetar.broker.storage import metrics
from magnetar.broker.storage.api import BadVersion, MetadataStore, MetadataStoreClosed, StorageError
from magnetar.broker.storage.group import GroupOwner, PendingGroup
from magnetar.broker.storage.handles import OpenFiles
from magnetar.broker.storage.metadata_api import MAX_COMMIT_OPS, Check, CommitOp, Put
from magnetar.broker.storage.objects.extents import Extent, extent_node
from magnetar.broker.storage.objects.ledger_file import ObjectLedgerFile
from magnetar.broker.storage.objects.store import ObjectExists, ObjectStore
from magnetar.broker.storage.segment import LedgerFile, WriteFailed

log = structlog.get_logger(__name__)

ROUNDS_PREFIX = "rounds/"
# Defaults suited to an object store on the same network (README has the
# figures for real S3): a round closes at this many bytes, and this many
# rounds are in flight at once.
DEFAULT_MAX_ROUND_BYTES = 8 * 1024 * 1024
DEFAULT_MAX_IN_FLIGHT = 4
# Rounds start at most this often: the PUT rate stays 1 / interval at most,
# whatever the number of topics (each PUT is billed), for at most this much
# added latency.
DEFAULT_ROUND_INTERVAL_S = 0.005
# Backoff between attempts of a failing PUT or commit.
RETRY_FIRST_S = 0.05
RETRY_MAX_S = 2.0
# A round whose extents are not committed this long after its PUT is given
# up (its groups fail): the collector deletes unnamed objects only past twice
# this age, so no commit can ever name an object it deleted.
COMMIT_DEADLINE_S = 300.0


class Fenced(Exception):
    """A ledger's fence moved: another broker owns it now."""


class ObjectJournal:
    """Construct on the event loop; :meth:`close` after every ledger stopped writing."""

    def __init__(
        self,
        store: ObjectStore,
        meta: MetadataStore,
        *,
        max_round_bytes: int = DEFAULT_MAX_ROUND_BYTES,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        write_guard: Callable[[], str | None] | None = None,
        commit_deadline_s: float = COMMIT_DEADLINE_S,
        round_interval_s: float = DEFAULT_ROUND_INTERVAL_S,
    ) -> None:
        if max_round_bytes < 1 or max_in_flight < 1:
            raise ValueError("max_round_bytes and max_in_flight must be >= 1")
        self.store = store
        self.meta = meta
        self.max_round_bytes = max_round_bytes
        self._guard = write_guard
        self.commit_deadline_s = commit_deadline_s
        self.round_interval_s = round_interval_s
        self._next_round_at = 0.0
        # Unique to this process's life: keys never collide with another
        # broker's or an earlier run's (a PUT is create-only besides).
        self.journal_id = uuid.uuid4().hex
        self._seq = 0
        self._files = OpenFiles()
        self._loop = asyncio.get_running_loop()
        self._ready: dict[GroupOwner, None] = {}
        self._wakeup: asyncio.Future[None] | None = None
        self._slots = asyncio.Semaphore(max_in_flight)
        self._rounds: set[asyncio.Task[None]] = set()
        self._closing = False
        self._task = self._loop.create_task(self._run(), name="object-journal")

    # -------------------------------------------------------------- interface

    @property
    def files(self) -> OpenFiles:
        return self._files

    def schedule(self, writer: GroupOwner) -> None:
        self._ready[writer] = None
        wakeup = self._wakeup
        if wakeup is not None:
            self._wakeup = None
            wakeup.set_result(None)

    def forget(self, lf: LedgerFile) -> None:
        """Nothing to sync on object storage."""

    async def close(self) -> None:
        """Write what is scheduled, wait for the rounds in flight."""
        if self._closing:
            return
        self._closing = True
        if self._wakeup is not None:
            self._wakeup.set_result(None)
            self._wakeup = None
        await asyncio.wait([self._task])
        if self._rounds:
            await asyncio.wait(list(self._rounds))

    # -------------------------------------------------------------- internals

    async def _run(self) -> None:
        while True:
            if not self._ready:
                if self._closing:
                    return
                wakeup: asyncio.Future[None] = self._loop.create_future()
                self._wakeup = wakeup
                await wakeup
                continue
            await self._slots.acquire()
            wait = self._next_round_at - self._loop.time()
            if wait > 0 and not self._closing:
                await asyncio.sleep(wait)  # what queues meanwhile joins this round
            self._next_round_at = self._loop.time() + self.round_interval_s
            groups = self._take_round()
            if not groups:
                self._slots.release()
                continue
            self._seq += 1
            task = self._loop.create_task(
                self._round(groups, f"{ROUNDS_PREFIX}{self.journal_id}/{self._seq:012d}"),
                name="object-journal-round",
            )
            self._rounds.add(task)
            task.add_done_callback(self._rounds.discard)

    def _take_round(self) -> list[PendingGroup]:
        """A group from each ready writer, up to the round's byte cap (the
        writers left over stay ready for the next round)."""
        groups: list[PendingGroup] = []
        nbytes = 0
        ready = self._ready
        while ready and nbytes < self.max_round_bytes:
            writer = next(iter(ready))
            del ready[writer]
            group = writer.take()
            if group is not None:
                groups.append(group)
                nbytes += group.record_bytes
        return groups

    async def _round(self, groups: list[PendingGroup], key: str) -> None:
        started = self._loop.time()
        try:
            await self._write(groups, key)
        except Exception as exc:  # never leave receipts pending
            log.exception("object journal round failed", key=key)
            for g in groups:
                if g.error is None:
                    g.error = WriteFailed(f"round {key} failed: {exc}", False)
        finally:
            self._slots.release()
        metrics.WRITE_SECONDS.observe(self._loop.time() - started)
        refused = self._guard() if self._guard is not None else None
        for g in groups:
            g.writer.finish(g, refused)

    async def _write(self, groups: list[PendingGroup], key: str) -> None:
        parts: list[bytes] = []
        extents: list[tuple[PendingGroup, Extent]] = []
        offset = 0
        for g in groups:
            parts.extend(g.parts)
            extents.append((g, Extent.of_group(g.first_id, g.start, key, offset, g.ends, g.nmsgs)))
            offset += g.record_bytes
        body = b"".join(parts)
        await self._retry(f"put of {key}", lambda: self._put(key, body))
        deadline = time.monotonic() + self.commit_deadline_s
        # Each ledger's extent, with its fence, in commits the store accepts.
        per_commit = MAX_COMMIT_OPS // 2
        chunks = [extents[i : i + per_commit] for i in range(0, len(extents), per_commit)]
        await asyncio.gather(*(self._commit(chunk, key, deadline) for chunk in chunks))
        for g, extent in extents:
            if g.error is None:
                lf = g.file
                assert isinstance(lf, ObjectLedgerFile)
                lf.write_records(g.parts, g.ends, False)
                lf.add_extent(extent)

    async def _put(self, key: str, body: bytes) -> None:
        try:
            await self.store.put(key, body)
        except ObjectExists:
            # An earlier attempt landed after all (its answer was lost): the
            # key is this journal's alone, so the object is ours.
            size = await self.store.size(key)
            if size != len(body):
                raise StorageError(f"{key} exists with {size} bytes, wrote {len(body)}") from None

    async def _commit(
        self, chunk: list[tuple[PendingGroup, Extent]], key: str, deadline: float
    ) -> None:
        ops: list[CommitOp] = []
        for g, extent in chunk:
            lf = g.file
            assert isinstance(lf, ObjectLedgerFile)
            node = extent_node(extent.first_entry, extent.key)
            ops.append(Put(f"{lf.extent_path}/{node}", extent.encode()))
            ops.append(Check(*lf.fence))
        try:
            await self._retry(f"index commit of {key}", lambda: self.meta.commit(ops), deadline)
        except BadVersion:
            if len(chunk) > 1:
                # Which ledger's fence moved? Commit them one by one.
                await asyncio.gather(*(self._commit([item], key, deadline) for item in chunk))
                return
            g = chunk[0][0]
            g.error = WriteFailed(
                f"fenced: another broker owns {g.file.path} now (round {key})", False
            )

    async def _retry(
        self,
        what: str,
        attempt: Callable[[], Awaitable[object]],
        deadline: float | None = None,
    ) -> None:
        """Until ``attempt`` succeeds; BadVersion (a fence) is final, and so
        is a failure past ``deadline`` (monotonic)."""
        delay = RETRY_FIRST_S
        failing_since: float | None = None
        while True:
            try:
                await attempt()
                if failing_since is not None:
                    log.info(
                        "object journal write succeeded after retries",
                        what=what,
                        after_s=round(time.monotonic() - failing_since, 3),
                    )
                return
            except (BadVersion, MetadataStoreClosed):
                raise  # a fence moved, or the broker is stopping
            except StorageError as exc:
                if failing_since is None:
                    failing_since = time.monotonic()
                    log.warning("object journal write failed; retrying", what=what, error=str(exc))
                if self._closing and time.monotonic() - failing_since > RETRY_MAX_S * 5:
                    raise  # closing: give up after a few attempts
                if deadline is not None and time.monotonic() > deadline:
                    raise StorageError(f"{what} gave up at its deadline: {exc}") from exc
            await asyncio.sleep(delay)
            delay = min(RETRY_MAX_S, delay * 2)
