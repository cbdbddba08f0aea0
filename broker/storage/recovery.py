"""Opening a managed ledger: rebuild the index from the files, cut a torn tail,
roll over to a new ledger, load every durable cursor.

Order matters for crash safety: a ledger id is written to the metadata record
before any entry goes into its file, and files not in the record are leftovers
(a crash between creating a file and recording it, or during a delete) and are
removed.
"""

from __future__ import annotations

import os
from functools import partial
from urllib.parse import unquote

import structlog

from magnetar.broker.storage.api import ManagedLedgerConfig, Position
from magnetar.broker.storage.births import make_dir_once
from magnetar.broker.storage.context import LedgerContext
from magnetar.broker.storage.cursor import ManagedCursorImpl
from magnetar.broker.storage.index_file import SUFFIX, TMP_SUFFIX
from magnetar.broker.storage.layout import LedgerInfo, LedgerRecord, decode_ledger_list
from magnetar.broker.storage.ledger import ManagedLedgerImpl
from magnetar.broker.storage.segment import LedgerFile, fsync_dir
from magnetar.broker.storage.tail_index import PART_SUFFIX

log = structlog.get_logger(__name__)


async def open_ledger(
    ctx: LedgerContext, name: str, config: ManagedLedgerConfig
) -> ManagedLedgerImpl:
    ml = ManagedLedgerImpl(ctx, name, config)
    try:
        got = await ctx.store.get(ml.meta_path)
        records = decode_ledger_list(got.value) if got is not None else []
        ml.meta_version = got.stat.version if got is not None else -1
        for i, rec in enumerate(records):
            last = i == len(records) - 1
            path = os.path.join(ml.dir, f"{rec.ledger_id}.log")
            try:
                lf, cut, torn = await ml.run_blocking(
                    LedgerFile.open_existing,
                    path,
                    rec.ledger_id,
                    last,
                    rec.entries,
                    ctx.indexes,
                )
            except FileNotFoundError:
                if not last:
                    log.error("ledger file missing", ledger=name, ledger_id=rec.ledger_id)
                continue
            if torn and last:
                log.warning("cut a torn tail", ledger=name, ledger_id=rec.ledger_id, bytes=cut)
            elif torn:
                log.error(
                    "closed ledger has bytes after its last record; not served",
                    ledger=name,
                    ledger_id=rec.ledger_id,
                    bytes=cut,
                )
            check_recorded_count(name, rec, lf)
            ctx.files.adopt(lf)
            info = LedgerInfo(
                rec.ledger_id, lf, ctx.cache.new_cache(rec.ledger_id, ml.slowest_read)
            )
            info.closed_at = rec.closed_at if rec.closed_at is not None else ctx.clock()
            ml.layout.append(info)
        # The ledger that was being written is closed now; an empty one goes.
        if len(ml.layout) and ml.layout.current.entry_count == 0:
            empty = ml.layout.remove(ml.layout.current.ledger_id)
            ctx.files.close(empty.file)
            await ml.run_blocking(os.unlink, empty.file.path)
        lac = last_confirmed(ml)
        # Above every recorded id, even one whose file was missing.
        newest = max((rec.ledger_id for rec in records), default=-1)
        new_id = await ctx.allocate_ledger_id(newest)
        path = os.path.join(ml.dir, f"{new_id}.log")
        if got is None:
            # New: its directory, first file and first record are made in the
            # background (creating a topic waits for no disk); receipts and
            # cursors wait for them (the writer holds appends until then).
            lf = LedgerFile.unborn(path, new_id)
        else:
            known = {f"{i}.log" for i in ml.layout.ids}
            lf = await ml.run_blocking(_prepare_files, ml.dir, known, new_id)
            ctx.files.adopt(lf)
        ml.layout.append(LedgerInfo(new_id, lf, ctx.cache.new_cache(new_id, ml.slowest_read)))
        if lac[1] < 0:
            lac = Position(new_id, -1)
        if got is None:
            ml.start(lac)
            ml.store_first_record(partial(_prepare_new, ml.dir, new_id), (ml.dir, path))
            return ml
        await ml.write_ledger_list()
        await restore_cursors(ml)
    except BaseException:
        for info in ml.layout.infos():
            ctx.files.close(info.file)
        raise
    ml.start(lac)
    return ml


def check_recorded_count(name: str, rec: LedgerRecord, lf: LedgerFile) -> None:
    """A closed ledger holds the entries its record counted; say so when not."""
    if rec.entries >= 0 and rec.entries != lf.entry_count:
        log.error(
            "ledger entry count differs from its record",
            ledger=name,
            ledger_id=rec.ledger_id,
            recorded=rec.entries,
            found=lf.entry_count,
        )


def last_confirmed(ml: ManagedLedgerImpl) -> Position:
    """The last entry of the newest ledger that has one."""
    for info in reversed(ml.layout.infos()):
        if info.entry_count:
            return Position(info.ledger_id, info.entry_count - 1)
    return Position(-1, -1)


async def restore_cursors(ml: ManagedLedgerImpl) -> None:
    """Every durable cursor stored under the managed ledger's node."""
    store = ml.ctx.store
    for encoded in await store.get_children(ml.meta_path):
        got = await store.get(f"{ml.meta_path}/{encoded}")
        if got is None:
            continue
        name = unquote(encoded)
        ml.cursors_by_name[name] = ManagedCursorImpl.restore(ml, name, got.value, got.stat.version)


def _prepare_new(path: str, new_id: int) -> None:
    """A new managed ledger's files (any leftover of an earlier creation that
    crashed before its record goes); the LedgerFile opens its own later."""
    if not make_dir_once(path):
        _remove_leftovers(path, set())
    LedgerFile.create(os.path.join(path, f"{new_id}.log"), new_id, False).close()


def _prepare_files(path: str, known: set[str], new_id: int) -> LedgerFile:
    """The directory made if new, leftover files removed, the new ledger's
    file created."""
    _make_dir(path)
    _remove_leftovers(path, known)
    return LedgerFile.create(os.path.join(path, f"{new_id}.log"), new_id, False)


def _make_dir(path: str) -> None:
    # Durable by the journal's checkpoint (its name with the first file's).
    if not os.path.isdir(path):
        os.makedirs(path, exist_ok=True)


def _remove_leftovers(path: str, known: set[str]) -> None:
    removed = False
    for name in os.listdir(path):
        if name.endswith(".log") and name not in known:
            log.warning("removing a leftover ledger file", file=os.path.join(path, name))
            os.unlink(os.path.join(path, name))
            removed = True
        elif name.endswith(PART_SUFFIX) or (
            name.endswith((SUFFIX, TMP_SUFFIX)) and f"{name.split('.', 1)[0]}.log" not in known
        ):
            # The index of a ledger gone, one whose writing a crash cut, or
            # the spilled index of a ledger being written (a scan rebuilds it).
            os.unlink(os.path.join(path, name))
            removed = True
    if removed:
        fsync_dir(path)
