"""One log line per key per interval, with the count held back (issue 19.4)."""

from __future__ import annotations

from magnetar.broker.log_throttle import RateLimitedLog


def test_one_line_per_key_per_interval_with_the_count() -> None:
    now = [100.0]
    log = RateLimitedLog(interval=10.0, clock=lambda: now[0])
    assert log.admit("t1") == 0
    assert [log.admit("t1") for _ in range(5)] == [None] * 5
    assert log.admit("t2") == 0  # other keys are independent
    now[0] += 9.9
    assert log.admit("t1") is None
    now[0] += 0.2
    assert log.admit("t1") == 6  # the line after the interval tells what was held back
    assert log.admit("t1") is None
