"""Helpers shared by the storage tests (types and a settable clock)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

OpenFactory = Callable[..., Any]
"""``await open_factory(**config)`` (the fixture of that name)."""


class Clock:
    """A settable wall clock for retention tests."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
