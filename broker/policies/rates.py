"""Rate policies: publishRate (what producers may put into a topic) and
dispatchRate (what a topic's subscriptions may hand to consumers), per second
(or per `ratePeriodInSecond`), in messages and bytes, as Pulsar's policies.

Nothing is refused. A topic over its publish rate stops reading the
publishing connection until the period ends; a dispatcher over the dispatch
rate stops reading entries until then. A period starts with the first event
after the previous one ended.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

PUBLISH_RATE_POLICY = "publishRate"
DISPATCH_RATE_POLICY = "dispatchRate"

Clock = Callable[[], float]


class InvalidRate(ValueError):
    pass


def _ints(body: object, keys: tuple[str, ...], defaults: tuple[int, ...]) -> list[int]:
    if not isinstance(body, dict):
        raise InvalidRate(f"the policy is a JSON object with {', '.join(keys)}")
    values = []
    for key, default in zip(keys, defaults, strict=True):
        value = body.get(key, default)
        if not isinstance(value, int) or isinstance(value, bool):
            raise InvalidRate(f"{key} must be an integer, got {value!r}")
        values.append(value)
    return values


@dataclass(frozen=True, slots=True)
class PublishRate:
    """Per second; a value <= 0 leaves that dimension unlimited."""

    messages: int = -1
    bytes: int = -1

    KEYS = ("publishThrottlingRateInMsg", "publishThrottlingRateInByte")

    @classmethod
    def from_json(cls, body: object) -> PublishRate:
        messages, size = _ints(body, cls.KEYS, (-1, -1))
        return cls(messages, size)

    def to_json(self) -> dict[str, Any]:
        return dict(zip(self.KEYS, (self.messages, self.bytes), strict=True))

    @property
    def unlimited(self) -> bool:
        return self.messages <= 0 and self.bytes <= 0


@dataclass(frozen=True, slots=True)
class DispatchRate:
    """Per `period` seconds; a value <= 0 leaves that dimension unlimited."""

    messages: int = -1
    bytes: int = -1
    period: int = 1

    KEYS = ("dispatchThrottlingRateInMsg", "dispatchThrottlingRateInByte", "ratePeriodInSecond")

    @classmethod
    def from_json(cls, body: object) -> DispatchRate:
        messages, size, period = _ints(body, cls.KEYS, (-1, -1, 1))
        if period < 1:
            raise InvalidRate(f"ratePeriodInSecond must be at least 1, got {period}")
        return cls(messages, size, period)

    def to_json(self) -> dict[str, Any]:
        return dict(zip(self.KEYS, (self.messages, self.bytes, self.period), strict=True))

    @property
    def unlimited(self) -> bool:
        return self.messages <= 0 and self.bytes <= 0


class _Period:
    """Messages and bytes counted in the current period."""

    def __init__(self, length: float, clock: Clock) -> None:
        self.length = length
        self._clock = clock
        self.start = float("-inf")  # the first event starts the first period
        self.messages = 0
        self.bytes = 0

    def now(self) -> float:
        now = self._clock()
        if now - self.start >= self.length:
            self.start = now
            self.messages = self.bytes = 0
        return now

    def remaining(self, now: float) -> float:
        return max(0.0, self.start + self.length - now)


class PublishRateLimiter:
    """One topic's publish quota."""

    def __init__(self, rate: PublishRate, clock: Clock = time.monotonic) -> None:
        self.rate = rate
        self._period = _Period(1.0, clock)

    def consume(self, messages: int, size: int) -> float:
        """Count one SEND; the seconds to stop reading its connection for
        (0.0 while this period's quota lasts)."""
        period = self._period
        now = period.now()
        period.messages += messages
        period.bytes += size
        rate = self.rate
        over = (0 < rate.messages <= period.messages) or (0 < rate.bytes <= period.bytes)
        return period.remaining(now) if over else 0.0


class DispatchRateLimiter:
    """One topic's dispatch quota, shared by its subscriptions' dispatchers;
    changed in place when the policy changes."""

    def __init__(self, clock: Clock = time.monotonic) -> None:
        self.rate: DispatchRate | None = None
        self._clock = clock
        self._period = _Period(1.0, clock)

    def set_rate(self, rate: DispatchRate | None) -> None:
        rate = None if rate is None or rate.unlimited else rate
        if rate != self.rate:
            self.rate = rate
            self._period = _Period(float(rate.period) if rate else 1.0, self._clock)

    def allowance(self) -> int | None:
        """Messages that may go now: None without a limit, 0 when spent."""
        rate = self.rate
        if rate is None:
            return None
        period = self._period
        period.now()
        if 0 < rate.bytes <= period.bytes:
            return 0
        if rate.messages <= 0:
            return None
        return max(0, rate.messages - period.messages)

    def wait(self) -> float:
        """Seconds until the current period ends."""
        return self._period.remaining(self._clock())

    def consume(self, messages: int, size: int) -> None:
        if self.rate is not None:
            self._period.now()
            self._period.messages += messages
            self._period.bytes += size
