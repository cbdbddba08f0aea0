"""Exponential backoff with a bound and jitter, for reconnects and retries.

The random source is injected so tests get exact delays; callers own the
waiting (and so the clock).
"""

from __future__ import annotations

import random as _random
from collections.abc import Callable

DEFAULT_INITIAL = 0.1
DEFAULT_MAX = 60.0


class Backoff:
    """Delays that double from `initial` up to `maximum`, each cut by up to `jitter`."""

    def __init__(
        self,
        initial: float = DEFAULT_INITIAL,
        maximum: float = DEFAULT_MAX,
        *,
        jitter: float = 0.1,
        rand: Callable[[], float] = _random.random,
    ) -> None:
        if initial <= 0 or maximum < initial:
            raise ValueError(f"backoff needs 0 < initial <= maximum, got {initial}, {maximum}")
        if not 0 <= jitter < 1:
            raise ValueError(f"jitter must be in [0, 1), got {jitter}")
        self.initial = initial
        self.maximum = maximum
        self.jitter = jitter
        self._rand = rand
        self._next = initial
        self.attempts = 0

    def next(self) -> float:
        """The delay before the next attempt."""
        current = self._next
        self._next = min(self._next * 2, self.maximum)
        self.attempts += 1
        # Jitter shortens the delay so reconnecting clients spread out without
        # ever waiting longer than the bound.
        return current * (1 - self.jitter * self._rand())

    def reset(self) -> None:
        self._next = self.initial
        self.attempts = 0
