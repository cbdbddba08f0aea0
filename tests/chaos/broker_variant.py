"""UNSAFE, tests only: the broker with one safety mechanism switched off, to
show that the fault runs' checker catches what it protects against.
``python -m tests.chaos.broker_variant VARIANT <broker arguments>``.

- ``no-session-guard``: the broker forgets its session deadline: the session
  counts as valid until a keep-alive answer says the lease is gone, and the
  write guard always says "go on". So an owner whose lease expired (paused,
  or cut from etcd) still confirms writes, possibly past the fence its
  successor set.
- ``no-fence``: the session guard stays, fencing goes, on both sides of a
  takeover. The old owner's managed ledger no longer fences itself after
  its first refused write, so it keeps appending (never confirming) while
  clients still reach it; and a ledger taken over is not sealed at the
  entry count its new owner found, so what the old owner wrote afterwards
  is served whenever the topic is opened again. Those writes were refused,
  their producers send them again to the new owner: stored twice.
- ``receipt-before-commit`` (object storage): a round's receipts go out
  once its object is uploaded, and its index (the extents) is committed to
  the metadata store a second later, as a lazy indexer would. A broker that
  dies in that second has acknowledged messages no index names: lost.
- ``safe``: the broker as shipped.

There is no broker option for this on purpose (nobody should run it so), so
the switch is a patch of one method in this launcher process only.

Every variant, ``safe`` included, also gets the hook of the
``stalled-write`` fault (run.py, cluster.py): while the pipe ``hold`` exists
in the directory ``CHAOS_STALL_DIR`` names, a journal write waits in its I/O
thread before it touches a file (a disk that stopped answering), blocked
opening and reading that pipe until the controller lets go; it says "h" on
the pipe ``held`` when it starts waiting and "w" once written. Without
``hold`` the hook only looks for it. On object storage the round's PUT
waits the same way (on a thread, the event loop goes on).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from pathlib import Path
from typing import Any

from magnetar.broker.__main__ import main
from magnetar.broker.cluster.session import EtcdSession
from magnetar.broker.storage import journal
from magnetar.broker.storage.ledger import ManagedLedgerImpl
from magnetar.broker.storage.objects.journal import ObjectJournal
from magnetar.broker.storage.segment import LedgerFile

VARIANTS = ("safe", "no-session-guard", "no-fence", "receipt-before-commit")
STALL_ENV = "CHAOS_STALL_DIR"
_open_existing = LedgerFile.open_existing
_write_round = journal._write_round
_object_put = ObjectJournal._put
_object_commit = ObjectJournal._commit
LAZY_COMMIT_S = 1.0
_lazy: set[asyncio.Task[None]] = set()


def _always_go_on(self: EtcdSession) -> str | None:
    return None


def _valid_until_told(self: EtcdSession) -> bool:
    return not self._lost


def _never_fenced(self: ManagedLedgerImpl) -> None:
    return None


def _unsealed(
    cls: type[LedgerFile],
    path: str,
    ledger_id: int,
    recover: bool,
    entries: int = -1,
    maps: Any = None,
) -> tuple[LedgerFile, int, bool]:
    return _open_existing(path, ledger_id, recover, -1, maps)


async def _commit_later(self: ObjectJournal, chunk: Any, key: str, deadline: float) -> None:
    async def later() -> None:
        await asyncio.sleep(LAZY_COMMIT_S)
        await _object_commit(self, chunk, key, deadline)

    task = asyncio.get_running_loop().create_task(later())
    _lazy.add(task)
    task.add_done_callback(_lazy.discard)


class _Stall:
    """The stalled-write hook's two pipes (module docstring)."""

    def __init__(self, stall_dir: Path) -> None:
        self.hold, self.held = stall_dir / "hold", stall_dir / "held"

    def tell(self, what: bytes) -> None:
        # Nobody listening (the controller closed its end): nobody to tell.
        with contextlib.suppress(OSError):
            fd = os.open(self.held, os.O_WRONLY | os.O_NONBLOCK)
            try:
                os.write(fd, what)
            finally:
                os.close(fd)

    def wait(self) -> None:
        """Say "h", then wait: opening waits for the controller's end,
        reading for it to close it."""
        self.tell(b"h")
        with contextlib.suppress(FileNotFoundError), self.hold.open("rb") as fifo:
            fifo.read()

    def write_round(self, *args: Any) -> bool:
        if not self.hold.exists():
            return _write_round(*args)
        self.wait()
        try:
            return _write_round(*args)
        finally:
            self.tell(b"w")

    async def put(self, journal: ObjectJournal, key: str, body: bytes) -> None:
        if not self.hold.exists():
            return await _object_put(journal, key, body)
        await asyncio.to_thread(self.wait)
        try:
            return await _object_put(journal, key, body)
        finally:
            self.tell(b"w")


if __name__ == "__main__":
    variant = sys.argv[1]
    if variant not in VARIANTS:
        sys.exit(f"unknown variant {variant!r}; one of {VARIANTS}")
    if variant == "no-session-guard":
        EtcdSession.write_guard = _always_go_on  # type: ignore[method-assign]
        EtcdSession.valid = property(_valid_until_told)  # type: ignore[method-assign, assignment]
    elif variant == "no-fence":
        LedgerFile.open_existing = classmethod(_unsealed)  # type: ignore[method-assign, assignment]
        ManagedLedgerImpl.fence = _never_fenced  # type: ignore[method-assign]
    elif variant == "receipt-before-commit":
        ObjectJournal._commit = _commit_later  # type: ignore[method-assign]
    stall_dir = os.environ.get(STALL_ENV)
    if stall_dir:
        stall = _Stall(Path(stall_dir))
        journal._write_round = stall.write_round  # type: ignore[assignment]
        # The hook holds the thread that writes; an inline round would hold the loop.
        journal.INLINE_WRITE_MAX_BYTES = -1
        ObjectJournal._put = lambda self, key, body: stall.put(self, key, body)  # type: ignore[method-assign]
    sys.exit(main(sys.argv[2:]))
