"""magnetar_event_loop_lag_seconds: a blocked event loop shows as a late timer."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry

from magnetar.broker.observability.loop_lag import LoopLagMonitor
from tests.support.polling import eventually_async


def _sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    value = registry.get_sample_value(name, labels)
    assert value is not None, name
    return value


async def test_a_blocked_loop_is_counted_as_a_stall() -> None:
    registry = CollectorRegistry()
    monitor = LoopLagMonitor(registry, interval=0.01)
    monitor.start()
    try:
        await eventually_async(
            "three samples", lambda: _sample(registry, "magnetar_event_loop_lag_seconds_count") >= 3
        )
        # An idle loop: every sample is well under 100 ms.
        assert _sample(registry, "magnetar_event_loop_lag_seconds_bucket", le="0.1") == (
            _sample(registry, "magnetar_event_loop_lag_seconds_count")
        )
        # What a blocking call does to everything on the loop.
        time.sleep(0.15)  # noqa: ASYNC251
        before = _sample(registry, "magnetar_event_loop_lag_seconds_count")
        await eventually_async(
            "a sample after the stall",
            lambda: _sample(registry, "magnetar_event_loop_lag_seconds_count") > before,
        )
        stalls = _sample(registry, "magnetar_event_loop_lag_seconds_count") - _sample(
            registry, "magnetar_event_loop_lag_seconds_bucket", le="0.1"
        )
        assert stalls == 1
        assert _sample(registry, "magnetar_event_loop_lag_seconds_sum") >= 0.13
    finally:
        await monitor.close()
        await monitor.close()  # idempotent
