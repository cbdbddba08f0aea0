"""Helpers shared by the storage tests (types, a settable clock, whether
io_uring works here)."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from magnetar.broker.storage.uring import IoRing

OpenFactory = Callable[..., Any]
"""``await open_factory(**config)`` (the fixture of that name)."""


class Clock:
    """A settable wall clock for retention tests."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


async def ring_available() -> bool:
    """Whether this kernel lets the broker set up an io_uring."""
    ring = IoRing.open(asyncio.get_running_loop())
    if ring is None:
        return False
    ring.close()
    return True


async def ring_makes_files(scratch: Path) -> bool:
    """Whether this kernel's io_uring makes directories and files (mkdirat
    needs Linux 5.15; a sandbox may refuse it): tried in ``scratch``."""
    ring = IoRing.open(asyncio.get_running_loop())
    if ring is None:
        return False
    probe = scratch / "ring-probe"
    try:
        ((mkdir, create),) = ring.make_dirs_and_files([(str(probe), str(probe / "f"))])
        try:
            await mkdir
            os.close(await create)
        except OSError:
            return False
    finally:
        ring.close()
    shutil.rmtree(probe, ignore_errors=True)
    return True
