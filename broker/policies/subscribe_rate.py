"""The subscribeRate policy (Pulsar's SubscribeRate and SubscribeRateLimiter):
how often one consumer may subscribe to a topic.

A consumer is known by Pulsar's ConsumerIdentifier: the client's host, the
consumer name and the consumer id, so what this limits is one consumer
(re)subscribing again and again, e.g. a client stuck in a reconnect loop.
Each identity may subscribe `subscribeThrottlingRatePerConsumer` times per
`ratePeriodInSecond`; past that the SUBSCRIBE is refused with NotAllowed,
which the official client fails fast on (WIRE 2) instead of retrying.

As in Pulsar all counts are cleared together when the period ends (Pulsar
clears them on a fixed-rate timer; here the first SUBSCRIBE after the end
starts the next period), so memory holds the identities of one period.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from magnetar.broker.policies.rates import Clock, InvalidRate

SUBSCRIBE_RATE_POLICY = "subscribeRate"

ConsumerIdentity = tuple[str, str, int]


def consumer_identity(address: str, consumer_name: str, consumer_id: int) -> ConsumerIdentity:
    """(host, name, id): `address` is the peer's "host:port"."""
    host = address.rsplit(":", 1)[0]
    return host, consumer_name, consumer_id


@dataclass(frozen=True, slots=True)
class SubscribeRate:
    """Subscribes per consumer per `period` seconds; <= 0: unlimited."""

    per_consumer: int = -1
    period: int = 30

    KEYS = ("subscribeThrottlingRatePerConsumer", "ratePeriodInSecond")

    @classmethod
    def from_json(cls, body: object) -> SubscribeRate:
        if not isinstance(body, dict):
            raise InvalidRate(f"the policy is a JSON object with {', '.join(cls.KEYS)}")
        values = []
        for key, default in zip(cls.KEYS, (-1, 30), strict=True):
            value = body.get(key, default)
            if not isinstance(value, int) or isinstance(value, bool):
                raise InvalidRate(f"{key} must be an integer, got {value!r}")
            values.append(value)
        per_consumer, period = values
        if period < 1:
            raise InvalidRate(f"ratePeriodInSecond must be at least 1, got {period}")
        return cls(per_consumer, period)

    def to_json(self) -> dict[str, Any]:
        return dict(zip(self.KEYS, (self.per_consumer, self.period), strict=True))

    @property
    def unlimited(self) -> bool:
        return self.per_consumer <= 0


class SubscribeRateLimiter:
    """One topic's subscribe counts per consumer identity."""

    def __init__(self, rate: SubscribeRate, clock: Clock = time.monotonic) -> None:
        self.rate = rate
        self._clock = clock
        self._start = float("-inf")  # the first SUBSCRIBE starts the first period
        self._counts: dict[ConsumerIdentity, int] = {}

    def try_acquire(self, identity: ConsumerIdentity) -> bool:
        """Count one SUBSCRIBE of `identity`; False (not counted) when this
        period's quota of it is spent."""
        now = self._clock()
        if now - self._start >= self.rate.period:
            self._start = now
            self._counts.clear()
        count = self._counts.get(identity, 0)
        if count >= self.rate.per_consumer:
            return False
        self._counts[identity] = count + 1
        return True
