"""The delayed-delivery tracker (SEMANTICS 8.1) with an injected clock."""

from __future__ import annotations

from magnetar.broker.features.delayed import DelayedDeliveryTracker
from magnetar.broker.storage.api import Position


class Clock:
    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def test_held_until_due_never_early() -> None:
    """SEM-8.1: a message is held until its deliver_at_time, not a tick before."""
    clock = Clock()
    tracker = DelayedDeliveryTracker(bucket_ms=1000, clock=clock)
    assert tracker.add(Position(3, 1), clock.now + 2500)
    assert tracker.add(Position(3, 0), clock.now + 1200)
    assert not tracker.add(Position(3, 2), clock.now)  # due already: not held
    assert len(tracker) == 2
    assert tracker.next_due_ms() == clock.now + 1200
    clock.now += 1199
    assert tracker.pop_due(10) == []
    clock.now += 1
    assert tracker.pop_due(10) == [Position(3, 0)]
    clock.now += 1299
    assert tracker.pop_due(10) == []
    clock.now += 1
    assert tracker.pop_due(10) == [Position(3, 1)]
    assert len(tracker) == 0 and tracker.next_due_ms() is None


def test_due_positions_come_in_position_order_up_to_the_limit() -> None:
    clock = Clock()
    tracker = DelayedDeliveryTracker(bucket_ms=100, clock=clock)
    for entry in (5, 1, 4, 2, 3):
        tracker.add(Position(7, entry), clock.now + 50 + entry)
    clock.now += 1000
    assert tracker.pop_due(3) == [Position(7, 1), Position(7, 2), Position(7, 3)]
    assert tracker.pop_due(3) == [Position(7, 4), Position(7, 5)]


def test_packed_memory_per_message() -> None:
    """Positions are packed: about 16 bytes a message, not an object each."""
    clock = Clock()
    tracker = DelayedDeliveryTracker(bucket_ms=1000, clock=clock)
    count = 200_000
    for i in range(count):
        tracker.add(Position(12, i), clock.now + 60_000 + (i % 600_000))
    per_message = tracker.memory_bytes() / count
    assert per_message < 24, per_message
