"""NegativeAcksTracker: nacked messages redelivered after a delay (SEM-3.5).

Each nacked id is kept with its due time (nack time + delay). The consumer
calls `tick()` every `tick_time` (about 33 ms, never more than the delay) and
sends one grouped redelivery request for what is due.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from magnetar.proto.ids import MessageId

DEFAULT_NACK_DELAY = 60.0
MAX_TICK_TIME = 0.033


class NegativeAcksTracker:
    def __init__(
        self,
        delay: float = DEFAULT_NACK_DELAY,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.delay = max(delay, 0.0)
        self._clock = clock
        self._due: dict[MessageId, float] = {}

    @property
    def tick_time(self) -> float:
        return max(min(MAX_TICK_TIME, self.delay), 0.001)

    def __len__(self) -> int:
        return len(self._due)

    def add(self, msg_id: MessageId) -> None:
        """Nack `msg_id`; a second nack before redelivery keeps the later due time."""
        self._due[msg_id] = self._clock() + self.delay

    def remove(self, msg_id: MessageId) -> None:
        self._due.pop(msg_id, None)

    def tick(self, now: float | None = None) -> list[MessageId]:
        """The ids whose delay has passed (removed from the tracker)."""
        if not self._due:
            return []
        now = self._clock() if now is None else now
        ready = [m for m, due in self._due.items() if due <= now]
        for msg_id in ready:
            del self._due[msg_id]
        return sorted(ready)

    def clear(self) -> None:
        self._due.clear()
