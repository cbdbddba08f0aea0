"""Sealing a ledger on object storage: its records, spread over the round
objects, rewritten into one object of its own (the layout of Pulsar's
tiered storage: a ledger, one object), and its extents replaced by one.

Steps, each safe to die after:
1. read the ledger's records back from the round objects, checksums checked;
2. PUT ``ledgers/<quoted name>/<ledger id>-<random>`` (create-only);
3. commit the one extent naming it, under the owner's fence;
4. delete the round extents (the collector then takes round objects that
   no extent names any more).
A ledger is sealed when it rolls over, when its managed ledger closes (the
one being written, if large) and at the next open (what is left).
A ledger found with both at open reads from its sealed object and drops the
leftover round extents; an object left by a death before step 3 is garbage
for the collector.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from array import array
from urllib.parse import quote

import structlog

from magnetar.broker.storage.api import MetadataStore, NotFound, StorageError
from magnetar.broker.storage.context import OwningLedger
from magnetar.broker.storage.layout import LedgerInfo
from magnetar.broker.storage.metadata_api import Check, Put
from magnetar.broker.storage.objects.extents import Extent, ExtentMap, extent_node
from magnetar.broker.storage.objects.journal import COMMIT_DEADLINE_S
from magnetar.broker.storage.objects.ledger_file import MAX_PARALLEL_GETS, ObjectLedgerFile
from magnetar.broker.storage.objects.store import ObjectCorrupt, ObjectStore
from magnetar.broker.storage.records import scan
from magnetar.broker.storage.sealer import IndexSealer

log = structlog.get_logger(__name__)

LEDGERS_PREFIX = "ledgers/"
# The ledger being written is sealed on close from this size up.
SEAL_AT_CLOSE_MIN_BYTES = 1024 * 1024


def ledger_object_key(name: str, ledger_id: int) -> str:
    return f"{LEDGERS_PREFIX}{quote(name, safe='')}/{ledger_id}-{uuid.uuid4().hex[:12]}"


def is_sealed(lf: ObjectLedgerFile) -> bool:
    extents = list(lf.extents)
    return len(extents) == 1 and extents[0].key.startswith(LEDGERS_PREFIX)


class ObjectSealer(IndexSealer):
    """Seals the ledgers of one managed ledger in the background; close awaits."""

    def __init__(
        self, ml: OwningLedger, objects: ObjectStore, commit_deadline_s: float = COMMIT_DEADLINE_S
    ) -> None:
        super().__init__(ml)
        self._objects = objects
        self._deadline_s = commit_deadline_s

    async def _seal(self, info: LedgerInfo) -> None:
        lf = info.file
        if not isinstance(lf, ObjectLedgerFile) or lf.entry_count == 0 or is_sealed(lf):
            return
        try:
            await seal_ledger(self._ml, self._objects, info, lf, self._deadline_s)
        except StorageError as exc:  # the round extents stay: the next open retries
            log.warning(
                "sealing a ledger failed",
                ledger=self._ml.name,
                ledger_id=info.ledger_id,
                error=str(exc),
            )

    async def close(self, seal_current: bool) -> None:
        """Await the sealing in flight; then seal the ledger being written
        if it is large (a reader after the next open, a restart or an owner
        change, would otherwise pay a GET per round it spans). A small one,
        or one whose last write may have failed, is sealed at the next open:
        that spares a broker of many topics a PUT each on its way down."""
        if self._tasks:
            await asyncio.wait(list(self._tasks))
        ml = self._ml
        if not seal_current or not len(ml.layout) or ml.ctx.write_health.failing:
            return
        info = ml.layout.current
        if info.file.size >= SEAL_AT_CLOSE_MIN_BYTES:
            await self._seal(info)


async def seal_ledger(
    ml: OwningLedger,
    objects: ObjectStore,
    info: LedgerInfo,
    lf: ObjectLedgerFile,
    commit_deadline_s: float = COMMIT_DEADLINE_S,
) -> None:
    """Steps 1-4 (module docstring); the commit is not made past
    ``commit_deadline_s`` after the start (the collector's rule)."""
    started = time.monotonic()
    store = ml.ctx.store
    offsets = lf.offsets
    count = lf.entry_count
    end = offsets[count]
    pieces = lf.extents.ranges(0, end)
    old_nodes = [extent_node(e.first_entry, e.key) for e in lf.extents]
    sem = asyncio.Semaphore(MAX_PARALLEL_GETS)

    async def get(key: str, start: int, length: int) -> bytes:
        async with sem:
            return await objects.get_range(key, start, length)

    body = b"".join(await asyncio.gather(*(get(*p) for p in pieces)))
    checked = scan(body, verify=True)
    if checked.valid_end != len(body) or len(checked.offsets) - 1 != count:
        raise ObjectCorrupt(f"{lf.path}: a record fails its checksum; not sealed")
    # A key of its own per attempt: an earlier attempt's object is an orphan
    # for the collector, never something this one might name after it went.
    key = ledger_object_key(ml.name, info.ledger_id)
    await objects.put(key, body)
    if time.monotonic() - started > commit_deadline_s:
        raise StorageError(f"sealing {lf.path} took too long to commit {key}; not sealed")
    cum = lf.cum_messages
    sealed = Extent(
        0,
        0,
        key,
        0,
        array("q", (offsets[i + 1] - offsets[i] for i in range(count))),
        array("q", (cum[i + 1] - cum[i] for i in range(count))),
    )
    await store.commit(
        [
            Put(f"{lf.extent_path}/{extent_node(0, key)}", sealed.encode()),
            Check(*lf.fence),
        ]
    )
    if ml.layout.get(info.ledger_id) is not info:
        return  # trimmed meanwhile: its extents are gone with it
    extents = ExtentMap()
    extents.append(sealed)
    lf.extents = extents
    for node in old_nodes:
        await drop_extent(store, f"{lf.extent_path}/{node}")
    log.debug("ledger sealed into one object", ledger=ml.name, ledger_id=info.ledger_id, key=key)


async def drop_extent(store: MetadataStore, path: str) -> None:
    with contextlib.suppress(NotFound):
        await store.delete(path)
