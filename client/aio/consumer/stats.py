"""ConsumerStats: counters a consumer logs every stats interval (rates and queue size)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


class ConsumerStats:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.received = 0
        self.received_bytes = 0
        self.acked = 0
        self.nacked = 0
        self.redelivery_requests = 0
        self._last = (clock(), 0, 0, 0)

    def snapshot(self, queue_size: int) -> dict[str, Any]:
        """Rates since the previous snapshot, per second."""
        now = self._clock()
        then, received, received_bytes, acked = self._last
        elapsed = max(now - then, 1e-9)
        self._last = (now, self.received, self.received_bytes, self.acked)
        return {
            "receive_rate": round((self.received - received) / elapsed, 2),
            "receive_bytes_rate": round((self.received_bytes - received_bytes) / elapsed, 2),
            "ack_rate": round((self.acked - acked) / elapsed, 2),
            "received_total": self.received,
            "acked_total": self.acked,
            "nacked_total": self.nacked,
            "redelivery_requests": self.redelivery_requests,
            "queue_size": queue_size,
        }
