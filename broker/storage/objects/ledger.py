"""ObjectManagedLedger: the managed ledger with its records on object storage.

Everything above the records is the file engine's (ManagedLedgerImpl: the
writer, cursors, cache, trimming); what differs is where a ledger's records
live (ObjectLedgerFile, its extents in the metadata store) and how a ledger is
opened: the new owner first moves the managed ledger's fence (so a previous
owner's rounds can no longer commit), then rebuilds each ledger's index from
its committed extents, without reading any data.
"""

from __future__ import annotations

import structlog

from magnetar.broker.storage.api import ManagedLedgerConfig, Position
from magnetar.broker.storage.context import LedgerContext
from magnetar.broker.storage.layout import LedgerInfo, decode_ledger_list
from magnetar.broker.storage.ledger import ManagedLedgerImpl
from magnetar.broker.storage.objects.extents import (
    Extent,
    ExtentFormatError,
    ExtentMap,
    extents_path,
    fence_path,
    key_of_node,
    ledger_extents_path,
)
from magnetar.broker.storage.objects.journal import COMMIT_DEADLINE_S
from magnetar.broker.storage.objects.ledger_file import ObjectLedgerFile
from magnetar.broker.storage.objects.read_ahead import ReadAhead
from magnetar.broker.storage.objects.sealer import (
    LEDGERS_PREFIX,
    ObjectSealer,
    drop_extent,
    is_sealed,
)
from magnetar.broker.storage.objects.store import ObjectStore
from magnetar.broker.storage.recovery import (
    check_recorded_count,
    last_confirmed,
    restore_cursors,
)
from magnetar.broker.storage.segment import LedgerFile

log = structlog.get_logger(__name__)


class ObjectManagedLedger(ManagedLedgerImpl):
    """Open with :func:`open_object_ledger`."""

    def __init__(
        self,
        ctx: LedgerContext,
        name: str,
        config: ManagedLedgerConfig,
        objects: ObjectStore,
        read_ahead: ReadAhead,
        commit_deadline_s: float = COMMIT_DEADLINE_S,
    ) -> None:
        super().__init__(ctx, name, config)
        self.read_ahead = read_ahead
        self._sealer = ObjectSealer(self, objects, commit_deadline_s)
        self.objects = objects
        self.dir = ""  # no local directory
        # (node, version) of the owner's fence, taken at open.
        self.fence_node = (fence_path(name), -1)

    def object_file(self, ledger_id: int, extents: ExtentMap | None = None) -> ObjectLedgerFile:
        return ObjectLedgerFile(
            self.objects,
            self.name,
            ledger_id,
            ledger_extents_path(self.name, ledger_id),
            self.fence_node,
            self.read_ahead,
            extents,
        )

    async def new_ledger_file(self, ledger_id: int) -> LedgerFile:
        return self.object_file(ledger_id)

    async def discard_files(self, files: list[LedgerFile]) -> None:
        # The extents go; the round objects they named are left to the
        # collector (another ledger's extents may name the same object).
        for lf in files:
            if isinstance(lf, ObjectLedgerFile):
                await self.ctx.store.delete_recursive(lf.extent_path)
                if is_sealed(lf):  # its own object: no other ledger names it
                    await self.objects.delete([next(iter(lf.extents)).key])

    async def remove_storage(self) -> None:
        await self.ctx.store.delete_recursive(extents_path(self.name))
        await self.ctx.store.delete_recursive(fence_path(self.name))


async def open_object_ledger(
    ctx: LedgerContext,
    name: str,
    config: ManagedLedgerConfig,
    objects: ObjectStore,
    owner: str,
    read_ahead: ReadAhead,
    commit_deadline_s: float = COMMIT_DEADLINE_S,
) -> ObjectManagedLedger:
    ml = ObjectManagedLedger(ctx, name, config, objects, read_ahead, commit_deadline_s)
    store = ctx.store
    got = await store.get(ml.meta_path)
    records = decode_ledger_list(got.value) if got is not None else []
    ml.meta_version = got.stat.version if got is not None else -1
    # Move the fence before reading the extents: a commit of the previous
    # owner that lands after this fails its check, so what is read below is
    # all there will ever be of those ledgers.
    stat = await store.put(ml.fence_node[0], owner.encode())
    ml.fence_node = (ml.fence_node[0], stat.version)
    for rec in records:
        extents = await _load_extents(ml, rec.ledger_id, rec.entries)
        lf = ml.object_file(rec.ledger_id, extents)
        check_recorded_count(name, rec, lf)
        info = LedgerInfo(rec.ledger_id, lf, ctx.cache.new_cache(rec.ledger_id, ml.slowest_read))
        info.closed_at = rec.closed_at if rec.closed_at is not None else ctx.clock()
        ml.layout.append(info)
    # The ledger that was being written is closed now; an empty one goes.
    if len(ml.layout) and ml.layout.current.entry_count == 0:
        empty = ml.layout.remove(ml.layout.current.ledger_id)
        await ml.discard_files([empty.file])
    lac = last_confirmed(ml)
    newest = max((rec.ledger_id for rec in records), default=-1)
    new_id = await ctx.allocate_ledger_id(newest)
    ml.layout.append(
        LedgerInfo(new_id, ml.object_file(new_id), ctx.cache.new_cache(new_id, ml.slowest_read))
    )
    if lac[1] < 0:
        lac = Position(new_id, -1)
    await ml.write_ledger_list()
    await restore_cursors(ml)
    ml.start(lac)
    for info in ml.layout.infos()[:-1]:  # closed now, the previous current too
        held = info.file
        if info.entry_count and isinstance(held, ObjectLedgerFile) and not is_sealed(held):
            ml.seal_later(info)
    return ml


async def _load_extents(ml: ObjectManagedLedger, ledger_id: int, entries: int) -> ExtentMap:
    """The committed extents of one ledger, in order; those past a closed
    ledger's recorded count, or after a gap, are not its entries."""
    ctx, name = ml.ctx, ml.name
    path = ledger_extents_path(name, ledger_id)
    extents = ExtentMap()
    children = await ctx.store.get_children(path)
    sealed = [c for c in children if key_of_node(c).startswith(LEDGERS_PREFIX)]
    if sealed:
        # Sealed, and died before the round extents were all dropped.
        for child in children:
            if child != sealed[0]:
                await drop_extent(ctx.store, f"{path}/{child}")
        children = sealed[:1]
    for child in children:
        got = await ctx.store.get(f"{path}/{child}")
        if got is None:
            continue
        try:
            extent = Extent.decode(got.value)
            if 0 <= entries <= extent.first_entry:
                break
            extents.append(extent)
        except ExtentFormatError as exc:
            log.error(
                "ledger extent unusable; the ledger ends before it",
                ledger=name,
                ledger_id=ledger_id,
                extent=child,
                error=str(exc),
            )
            break
    return extents
