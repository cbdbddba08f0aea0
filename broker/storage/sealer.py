"""Writing sealed ledgers' index files in the background, for one managed ledger.

A ledger rolled over takes no more appends: its index goes to its file on an
I/O thread, and lookups move there once it is written (index_file.py). The
ledger being written when its managed ledger closes is sealed too (the next
open starts a new one), so a large one spares that open a scan.
"""

from __future__ import annotations

import asyncio

import structlog

from magnetar.broker.storage.context import OwningLedger
from magnetar.broker.storage.index_file import MIN_INDEXED_ENTRIES
from magnetar.broker.storage.layout import LedgerInfo

log = structlog.get_logger(__name__)


class IndexSealer:
    """Owns the index writes of one managed ledger; :meth:`close` awaits them."""

    def __init__(self, ml: OwningLedger) -> None:
        self._ml = ml
        self._tasks: set[asyncio.Task[None]] = set()

    def seal_later(self, info: LedgerInfo) -> None:
        task = asyncio.get_running_loop().create_task(
            self._seal(info), name=f"ml-seal:{self._ml.name}"
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _seal(self, info: LedgerInfo) -> None:
        ml = self._ml
        try:
            index = await ml.run_blocking(info.file.seal_index, ml.ctx.indexes)
        except FileNotFoundError:
            return  # trimmed meanwhile: nothing to index
        except OSError as exc:  # the arrays stay; the next open scans the file
            log.warning("writing a ledger's index failed", ledger=ml.name, error=str(exc))
            return
        if index is not None and ml.layout.get(info.ledger_id) is info:
            info.file.adopt_index(index)

    async def close(self, seal_current: bool) -> None:
        """Wait for the writes in flight; then, unless the ledger was fenced
        (its file may end in a write that failed), seal the current ledger."""
        if self._tasks:
            await asyncio.wait(list(self._tasks))
        ml = self._ml
        if not seal_current or not len(ml.layout):
            return
        lf = ml.layout.current.file
        if lf.entry_count < MIN_INDEXED_ENTRIES or ml.ctx.write_health.failing:
            return
        try:
            await ml.run_blocking(lf.seal_index, ml.ctx.indexes)
        except OSError as exc:
            log.warning("writing a ledger's index failed", ledger=ml.name, error=str(exc))
