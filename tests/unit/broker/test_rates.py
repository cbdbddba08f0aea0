"""The publishRate and dispatchRate limiters (issue 15): a period's quota of
messages or bytes, then a pause until the period ends."""

from __future__ import annotations

import pytest

from magnetar.broker.policies.rates import (
    DispatchRate,
    DispatchRateLimiter,
    InvalidRate,
    PublishRate,
    PublishRateLimiter,
)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_message_quota_then_a_pause_until_the_next_second() -> None:
    clock = Clock()
    limiter = PublishRateLimiter(PublishRate(messages=3), clock)
    assert limiter.consume(1, 10) == 0.0
    clock.now += 0.25
    assert limiter.consume(1, 10) == 0.0
    assert limiter.consume(1, 10) == pytest.approx(0.75)  # the third spends the quota
    clock.now += 0.75
    assert limiter.consume(2, 10) == 0.0  # a new second, a new quota


def test_byte_quota_and_batches_count_their_messages() -> None:
    clock = Clock()
    limiter = PublishRateLimiter(PublishRate(messages=100, bytes=1000), clock)
    assert limiter.consume(50, 900) == 0.0
    assert limiter.consume(1, 100) == pytest.approx(1.0)
    clock.now += 2.5  # a new second starts with this SEND
    assert limiter.consume(100, 1) == pytest.approx(1.0)


def test_policy_body() -> None:
    body = {"publishThrottlingRateInMsg": 10, "publishThrottlingRateInByte": -1}
    rate = PublishRate.from_json(body)
    assert rate == PublishRate(10, -1) and rate.to_json() == body
    assert PublishRate.from_json({}).unlimited
    with pytest.raises(InvalidRate):
        PublishRate.from_json({"publishThrottlingRateInMsg": "10"})
    with pytest.raises(InvalidRate):
        PublishRate.from_json([10])


def test_dispatch_allowance_shrinks_and_comes_back_next_period() -> None:
    clock = Clock()
    limiter = DispatchRateLimiter(clock)
    assert limiter.allowance() is None  # no policy
    limiter.set_rate(DispatchRate(messages=10, period=2))
    assert limiter.allowance() == 10
    limiter.consume(7, 700)
    assert limiter.allowance() == 3
    limiter.consume(3, 300)
    assert limiter.allowance() == 0
    clock.now += 0.5
    assert limiter.wait() == pytest.approx(1.5)
    clock.now += 1.5
    assert limiter.allowance() == 10
    limiter.set_rate(DispatchRate(messages=-1, bytes=500))
    limiter.consume(1, 500)
    assert limiter.allowance() == 0  # bytes spent
    limiter.set_rate(None)
    assert limiter.allowance() is None


def test_dispatch_policy_body() -> None:
    body = {
        "dispatchThrottlingRateInMsg": 5,
        "dispatchThrottlingRateInByte": -1,
        "ratePeriodInSecond": 1,
    }
    assert DispatchRate.from_json(body).to_json() == body
    assert DispatchRate.from_json({"dispatchThrottlingRateInMsg": 5}) == DispatchRate(5, -1, 1)
    with pytest.raises(InvalidRate):
        DispatchRate.from_json({"ratePeriodInSecond": 0})
