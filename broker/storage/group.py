"""One ledger's share of a journal round (PendingGroup), and what the journal
needs of the writer that made it: the journal sits below the writers, so it
knows them only by this protocol."""

from __future__ import annotations

import asyncio
from typing import Protocol

from magnetar.broker.storage.api import Position, SyncPolicy
from magnetar.broker.storage.handles import OpenFiles
from magnetar.broker.storage.journal_format import encode_group_header
from magnetar.broker.storage.layout import LedgerInfo
from magnetar.broker.storage.segment import LedgerFile, WriteFailed


class GroupOwner(Protocol):
    """The writer of one ledger, as the journal sees it."""

    @property
    def sync_policy(self) -> SyncPolicy: ...

    @property
    def name_bytes(self) -> bytes: ...

    def take(self) -> PendingGroup | None:
        """The ledger's queued entries as one group, or None when none wait."""

    def finish(self, group: PendingGroup, refused: str | None) -> None:
        """The round that held `group` is on disk (or failed, or was refused)."""


class RoundWriter(Protocol):
    """The broker's group commit as the ledgers and their factory see it: the
    file journal (journal.py) or the object journal (objects/journal.py)."""

    @property
    def files(self) -> OpenFiles:
        """The open-file limit the rounds respect."""

    def schedule(self, writer: GroupOwner) -> None:
        """``writer`` has appends queued: take them in a coming round."""

    def forget(self, lf: LedgerFile) -> None:
        """A ledger deleted: nothing more to sync for it."""

    async def close(self) -> None:
        """Finish the rounds, then stop (every ledger has stopped writing)."""


class PendingGroup:
    """One ledger's share of a journal round: encoded, not yet written."""

    __slots__ = (
        "datas",
        "ends",
        "error",
        "first_id",
        "futs",
        "header",
        "info",
        "journaled",
        "nbytes",
        "nmsgs",
        "parts",
        "queued_at",
        "record_bytes",
        "start",
        "sync",
        "writer",
    )

    def __init__(
        self,
        writer: GroupOwner,
        info: LedgerInfo,
        datas: list[bytes],
        nmsgs: list[int],
        futs: list[asyncio.Future[Position]],
        nbytes: int,
        queued_at: float,
    ) -> None:
        lf = info.file
        self.writer = writer
        self.info = info
        self.datas = datas
        self.nmsgs = nmsgs
        self.futs = futs
        self.nbytes = nbytes
        self.queued_at = queued_at
        self.first_id = len(lf.offsets) - 1
        self.start = lf.write_end
        self.parts, self.ends = lf.encode(datas, nmsgs)
        self.record_bytes = self.ends[-1] - self.start
        policy = writer.sync_policy
        self.sync = policy is SyncPolicy.FSYNC
        # Under `none` nothing is promised past the OS: no journal copy.
        self.journaled = policy is not SyncPolicy.NONE
        self.header = (
            encode_group_header(
                writer.name_bytes, info.ledger_id, self.first_id, len(datas), self.record_bytes
            )
            if self.journaled
            else b""
        )
        self.error: WriteFailed | None = None

    @property
    def file(self) -> LedgerFile:
        return self.info.file
