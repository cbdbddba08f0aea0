"""Publish rate limits (Pulsar's publishRate policy): at most N messages and
B bytes per second into one topic. As in Pulsar, nothing is refused: once a
second's quota is spent, the connections publishing to the topic stop being
read until the next second starts, so producers slow down by backpressure."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

POLICY_KEY = "publishRate"
_MSGS = "publishThrottlingRateInMsg"
_BYTES = "publishThrottlingRateInByte"


class InvalidRate(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class PublishRate:
    """Per second; a value <= 0 means that dimension is not limited."""

    messages: int = -1
    bytes: int = -1

    @classmethod
    def from_json(cls, body: object) -> PublishRate:
        if not isinstance(body, dict):
            raise InvalidRate(f'the policy is a JSON object: {{"{_MSGS}": N, "{_BYTES}": B}}')
        values = []
        for key in (_MSGS, _BYTES):
            value = body.get(key, -1)
            if not isinstance(value, int) or isinstance(value, bool):
                raise InvalidRate(f"{key} must be an integer, got {value!r}")
            values.append(value)
        return cls(values[0], values[1])

    def to_json(self) -> dict[str, Any]:
        return {_MSGS: self.messages, _BYTES: self.bytes}

    @property
    def unlimited(self) -> bool:
        return self.messages <= 0 and self.bytes <= 0


class PublishRateLimiter:
    """Counts what one topic took in the current one-second period."""

    def __init__(self, rate: PublishRate, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self._clock = clock
        self._period_start = clock()
        self._messages = 0
        self._bytes = 0

    def consume(self, messages: int, size: int) -> float:
        """Count one SEND; the seconds to stop reading its connection for
        (0.0 while this period's quota lasts)."""
        now = self._clock()
        if now - self._period_start >= 1.0:
            # A new second starts with the first SEND after the last one ended.
            self._period_start = now
            self._messages = self._bytes = 0
        self._messages += messages
        self._bytes += size
        rate = self.rate
        over = (0 < rate.messages <= self._messages) or (0 < rate.bytes <= self._bytes)
        return max(0.0, self._period_start + 1.0 - now) if over else 0.0
