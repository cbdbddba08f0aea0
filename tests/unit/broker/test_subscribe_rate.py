"""The subscribeRate limiter (Pulsar's SubscribeRateLimiter): each consumer
identity (host, consumer name, consumer id) may subscribe N times per period;
the counts start over when the period ends."""

from __future__ import annotations

import pytest

from magnetar.broker.policies.rates import InvalidRate
from magnetar.broker.policies.subscribe_rate import (
    SubscribeRate,
    SubscribeRateLimiter,
    consumer_identity,
)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_quota_per_identity_then_refused_until_the_period_ends() -> None:
    clock = Clock()
    limiter = SubscribeRateLimiter(SubscribeRate(per_consumer=2, period=60), clock)
    me = consumer_identity("10.0.0.1:4000", "c", 0)
    assert limiter.try_acquire(me)
    clock.now += 10
    assert limiter.try_acquire(me)
    clock.now += 10
    assert not limiter.try_acquire(me)  # the third in 60 s
    assert not limiter.try_acquire(me)  # a refusal is not counted, nor lifts anything
    clock.now += 39.9
    assert not limiter.try_acquire(me)
    clock.now += 0.1  # 60 s after the period's first subscribe
    assert limiter.try_acquire(me)
    assert limiter.try_acquire(me)
    assert not limiter.try_acquire(me)


def test_identities_are_counted_apart() -> None:
    limiter = SubscribeRateLimiter(SubscribeRate(per_consumer=1, period=30), Clock())
    assert limiter.try_acquire(consumer_identity("10.0.0.1:4000", "c", 0))
    assert not limiter.try_acquire(consumer_identity("10.0.0.1:4001", "c", 0))  # same host
    assert limiter.try_acquire(consumer_identity("10.0.0.2:4000", "c", 0))  # another host
    assert limiter.try_acquire(consumer_identity("10.0.0.1:4000", "d", 0))  # another name
    assert limiter.try_acquire(consumer_identity("10.0.0.1:4000", "c", 1))  # another consumer


def test_identity_of_an_ipv6_peer_keeps_the_whole_host() -> None:
    assert consumer_identity("::1:5000", "c", 3) == ("::1", "c", 3)


def test_policy_body() -> None:
    body = {"subscribeThrottlingRatePerConsumer": 5, "ratePeriodInSecond": 10}
    rate = SubscribeRate.from_json(body)
    assert rate == SubscribeRate(5, 10) and rate.to_json() == body
    assert SubscribeRate.from_json({"subscribeThrottlingRatePerConsumer": 3}).period == 30
    assert SubscribeRate.from_json({}).unlimited
    assert SubscribeRate.from_json({"subscribeThrottlingRatePerConsumer": 0}).unlimited
    bad: object
    for bad in (
        [],
        {"subscribeThrottlingRatePerConsumer": "5"},
        {"subscribeThrottlingRatePerConsumer": True},
        {"subscribeThrottlingRatePerConsumer": 5, "ratePeriodInSecond": 0},
    ):
        with pytest.raises(InvalidRate):
            SubscribeRate.from_json(bad)
