"""Fixtures for storage unit tests: a factory on tmp_path, closed after the test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from magnetar.broker.storage import FileManagedLedgerFactory, ManagedLedgerConfig
from tests.support.etcd import etcd  # noqa: F401  (a fixture: a real etcd server)
from tests.unit.storage.storage_support import Clock


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def factory(tmp_path: Path, clock: Clock) -> AsyncIterator[FileManagedLedgerFactory]:
    f = await FileManagedLedgerFactory.create(str(tmp_path), ManagedLedgerConfig(), clock=clock)
    yield f
    await f.close()


@pytest.fixture
async def open_factory(tmp_path: Path, clock: Clock) -> AsyncIterator[Callable[..., Any]]:
    """``await open_factory(**config)``: a factory on tmp_path; closed at the end."""
    opened: list[FileManagedLedgerFactory] = []

    async def make(**config: Any) -> FileManagedLedgerFactory:
        f = await FileManagedLedgerFactory.create(
            str(tmp_path), ManagedLedgerConfig(**config), clock=clock
        )
        opened.append(f)
        return f

    yield make
    for f in opened:
        await f.close()
