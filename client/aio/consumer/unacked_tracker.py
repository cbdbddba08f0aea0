"""UnAckedMessageTracker: redelivery of messages not acked within ack_timeout (SEM-3.6).

A time wheel of ceil(ack_timeout / tick) buckets. A received message goes
into the newest bucket; each `tick()` expires the oldest bucket and opens a
new one, so a message expires between ack_timeout and ack_timeout + tick
after it was received. Acking (or nacking, SEM-3.5) removes it.

The tracker owns no task: the consumer calls `tick()` every `tick_time`
seconds and redelivers what it returns.
"""

from __future__ import annotations

import math
from collections import deque

from magnetar.client.aio.checks import check_ack_timeout
from magnetar.proto.ids import MessageId

DEFAULT_TICK_TIME = 1.0


class UnAckedMessageTracker:
    def __init__(self, ack_timeout: float, tick_time: float = DEFAULT_TICK_TIME) -> None:
        check_ack_timeout(ack_timeout, tick_time)
        self.ack_timeout = ack_timeout
        self.tick_time = tick_time
        count = max(math.ceil(ack_timeout / tick_time - 1e-9), 1)
        self._wheel: deque[set[MessageId]] = deque(set() for _ in range(count))
        self._where: dict[MessageId, set[MessageId]] = {}

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, msg_id: MessageId) -> bool:
        return msg_id in self._where

    def add(self, msg_id: MessageId) -> None:
        if msg_id in self._where:
            return
        bucket = self._wheel[-1]
        bucket.add(msg_id)
        self._where[msg_id] = bucket

    def remove(self, msg_id: MessageId) -> bool:
        bucket = self._where.pop(msg_id, None)
        if bucket is None:
            return False
        bucket.discard(msg_id)
        return True

    def remove_up_to(self, msg_id: MessageId) -> None:
        """Cumulative ack: forget every tracked id at or before `msg_id`."""
        for tracked in [m for m in self._where if m <= msg_id]:
            self.remove(tracked)

    def tick(self) -> list[MessageId]:
        """Expire the oldest bucket: its ids, to redeliver."""
        expired = self._wheel.popleft()
        self._wheel.append(set())
        for msg_id in expired:
            del self._where[msg_id]
        return sorted(expired)

    def clear(self) -> None:
        for bucket in self._wheel:
            bucket.clear()
        self._where.clear()
