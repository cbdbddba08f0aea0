"""Log lines that repeat under a fault (a full disk answers every publish
with the same error) are rate-limited: one line per key per interval, with
how many were held back since the last one."""

from __future__ import annotations

import time
from collections.abc import Callable


class RateLimitedLog:
    def __init__(self, interval: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self._clock = clock
        # key -> (when its last line was written, lines held back since)
        self._seen: dict[str, tuple[float, int]] = {}

    def admit(self, key: str) -> int | None:
        """None: stay quiet. A number: write the line now, saying that many
        similar ones were suppressed before it."""
        now = self._clock()
        last = self._seen.get(key)
        if last is not None and now - last[0] < self.interval:
            self._seen[key] = (last[0], last[1] + 1)
            return None
        self._seen[key] = (now, 0)
        if len(self._seen) > 10_000:  # bounded: forget keys quiet for an interval
            self._seen = {k: v for k, v in self._seen.items() if now - v[0] < self.interval}
        return 0 if last is None else last[1]
