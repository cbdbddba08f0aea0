"""The publishRate limiter (issue 15): a second's quota of messages or bytes,
then a pause until the next second starts."""

from __future__ import annotations

import pytest

from magnetar.broker.publish_rate import InvalidRate, PublishRate, PublishRateLimiter


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
