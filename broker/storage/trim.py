"""Trimming: delete whole ledgers that every durable cursor has consumed and that
retention no longer keeps (Pulsar's rules: a consumed ledger goes once it is
older than the retention time or the ledger is over the retention size).
"""

from __future__ import annotations

import contextlib
import os

import structlog

from magnetar.broker.storage import metrics
from magnetar.broker.storage.api import Position
from magnetar.broker.storage.context import OwningLedger
from magnetar.broker.storage.index_file import remove_index
from magnetar.broker.storage.layout import LedgerInfo

log = structlog.get_logger(__name__)


def select_victims(ml: OwningLedger) -> list[LedgerInfo]:
    """The oldest closed ledgers that may go now (possibly none)."""
    cfg = ml.config
    infos = ml.layout.infos()
    if len(infos) <= 1 or (cfg.retention_time_s < 0 and cfg.retention_size_bytes < 0):
        return []
    marks = ml.durable_mark_deletes
    # No durable cursor: nothing is needed by anyone (Pulsar does the same).
    slowest = min(marks.values()) if marks else ml.last_confirmed_position
    now = ml.ctx.clock()
    remaining = ml.total_size
    victims: list[LedgerInfo] = []
    for info in infos[:-1]:
        if Position(info.ledger_id, info.entry_count - 1) > slowest:
            break
        expired = (
            cfg.retention_time_s >= 0
            and info.closed_at is not None
            and now - info.closed_at >= cfg.retention_time_s
        )
        oversize = cfg.retention_size_bytes >= 0 and remaining > cfg.retention_size_bytes
        if not (expired or oversize):
            break
        victims.append(info)
        remaining -= info.file.data_size
    return victims


async def trim_ledgers(ml: OwningLedger) -> int:
    """Delete the victims: metadata first, then caches and files."""
    victims = select_victims(ml)
    if not victims:
        return 0
    for info in victims:
        ml.layout.remove(info.ledger_id)
    try:
        await ml.write_ledger_list()
    except BaseException:
        ml.layout.restore_front(victims)
        raise
    files = ml.ctx.files
    for info in victims:
        info.cache.clear()
        ml.forget_unsynced(info.file)
        if info.file.refs == 0:
            files.close(info.file)
        # else: the last reader closes the fd (ManagedLedgerImpl.read_in_ledger)
    await ml.discard_files([i.file for i in victims])
    metrics.LEDGERS_TRIMMED.inc(len(victims))
    log.info(
        "trimmed ledgers",
        ledger=ml.name,
        deleted=[i.ledger_id for i in victims],
    )
    return len(victims)


def unlink_ledger_files(paths: list[str]) -> None:
    """Ledger files and their index files, when there. *Blocking*."""
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        remove_index(path)


def remove_tree(path: str) -> None:
    """A managed ledger's directory and its files. *Blocking*."""
    if not os.path.isdir(path):
        return
    for entry in os.listdir(path):
        os.unlink(os.path.join(path, entry))
    os.rmdir(path)
