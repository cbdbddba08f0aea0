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
- ``safe``: the broker as shipped.

There is no broker option for this on purpose (nobody should run it so), so
the switch is a patch of one method in this launcher process only.

Every variant, ``safe`` included, also gets the hook of the
``stalled-write`` fault (run.py, cluster.py): while the pipe ``hold`` exists
in the directory ``CHAOS_STALL_DIR`` names, a journal write waits in its I/O
thread before it touches a file (a disk that stopped answering), blocked
opening and reading that pipe until the controller lets go; it says "h" on
the pipe ``held`` when it starts waiting and "w" once written. Without
``hold`` the hook only looks for it.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Any

from magnetar.broker.__main__ import main
from magnetar.broker.cluster.session import EtcdSession
from magnetar.broker.storage import journal
from magnetar.broker.storage.ledger import ManagedLedgerImpl
from magnetar.broker.storage.segment import LedgerFile

VARIANTS = ("safe", "no-session-guard", "no-fence")
STALL_ENV = "CHAOS_STALL_DIR"
_open_existing = LedgerFile.open_existing
_write_round = journal._write_round


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


def _stallable(stall_dir: Path) -> Any:
    hold, held = stall_dir / "hold", stall_dir / "held"

    def tell(what: bytes) -> None:
        # Nobody listening (the controller closed its end): nobody to tell.
        with contextlib.suppress(OSError):
            fd = os.open(held, os.O_WRONLY | os.O_NONBLOCK)
            try:
                os.write(fd, what)
            finally:
                os.close(fd)

    def write_round(*args: Any) -> bool:
        if not hold.exists():
            return _write_round(*args)
        tell(b"h")
        # Opening waits for the controller's end, reading for it to close it.
        with contextlib.suppress(FileNotFoundError), hold.open("rb") as fifo:
            fifo.read()
        try:
            return _write_round(*args)
        finally:
            tell(b"w")

    return write_round


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
    stall_dir = os.environ.get(STALL_ENV)
    if stall_dir:
        journal._write_round = _stallable(Path(stall_dir))
    sys.exit(main(sys.argv[2:]))
