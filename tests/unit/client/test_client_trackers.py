"""The consumer's trackers, driven by an injected clock (no sleeps)."""

from __future__ import annotations

import asyncio

import pytest

from magnetar.client.aio.checks import check_ack_timeout
from magnetar.client.aio.consumer.ack_grouping import AckGroupingTracker
from magnetar.client.aio.consumer.nack_tracker import NegativeAcksTracker
from magnetar.client.aio.consumer.stats import ConsumerStats
from magnetar.client.aio.consumer.unacked_tracker import UnAckedMessageTracker
from magnetar.client.aio.errors import InvalidConfiguration
from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.ids import MessageId


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _ids(command: pb.CommandAck) -> list[tuple[int, int]]:
    return [(d.ledgerId, d.entryId) for d in command.message_id]


def test_individual_acks_are_grouped_until_the_group_time() -> None:
    """SEM-3.4: individual acks collect in a set and are flushed every ack_group_time."""
    clock = Clock()
    tracker = AckGroupingTracker(7, group_time=0.125, clock=clock)
    assert not tracker.add_individual((1, 2))
    assert not tracker.add_individual((1, 1))
    assert not tracker.add_individual((1, 2))
    clock.now += 0.0625
    assert not tracker.flush_due()
    clock.now += 0.0625
    assert tracker.flush_due()
    (sent,) = tracker.take()
    assert sent.command.consumer_id == 7
    assert sent.command.ack_type == pb.CommandAck.Individual
    assert _ids(sent.command) == [(1, 1), (1, 2)]
    assert tracker.pending_count == 0 and not tracker.flush_due()


def test_acks_flush_at_max_pending() -> None:
    """SEM-3.4: 1000 pending acks force a flush before the group time."""
    tracker = AckGroupingTracker(1, group_time=10, clock=Clock())
    flags = [tracker.add_individual((1, i)) for i in range(1000)]
    assert flags[-1] and not any(flags[:-1])
    (sent,) = tracker.take()
    assert len(sent.command.message_id) == 1000


def test_zero_group_time_sends_at_once() -> None:
    """SEM-1 ack_group_time 0: every ack asks for an immediate flush."""
    tracker = AckGroupingTracker(1, group_time=0, clock=Clock())
    assert tracker.add_individual((3, 4))
    assert tracker.add_cumulative(MessageId(3, 5))


def test_batch_index_acks_keep_a_bitset_per_entry() -> None:
    """SEM-3.3: batch-index acks are a bitset of the still-unacked indexes per entry."""
    tracker = AckGroupingTracker(1, clock=Clock())
    tracker.add_batch_index(MessageId(5, 6, -1, 0, 3))
    tracker.add_batch_index(MessageId(5, 6, -1, 2, 3))
    (sent,) = tracker.take()
    (data,) = sent.command.message_id
    assert (data.ledgerId, data.entryId, data.batch_size) == (5, 6, 3)
    assert list(data.ack_set) == [0b010]
    for index in range(3):
        tracker.add_batch_index(MessageId(5, 6, -1, index, 3))
    (sent,) = tracker.take()
    (data,) = sent.command.message_id
    assert list(data.ack_set) == [] and (data.ledgerId, data.entryId) == (5, 6)


def test_cumulative_keeps_the_newest() -> None:
    """SEM-3.4: of several cumulative acks only the newest position is sent."""
    tracker = AckGroupingTracker(1, clock=Clock())
    tracker.add_cumulative(MessageId(1, 5))
    tracker.add_cumulative(MessageId(1, 9))
    tracker.add_cumulative(MessageId(1, 7))
    assert tracker.is_pending(MessageId(1, 3))
    (sent,) = tracker.take()
    assert sent.command.ack_type == pb.CommandAck.Cumulative
    assert _ids(sent.command) == [(1, 9)]


async def test_waiters_ride_on_the_last_command() -> None:
    """SEM-1 ack_receipt_enabled: the ack futures travel with the commands that carry them."""
    tracker = AckGroupingTracker(1, clock=Clock())
    loop = asyncio.get_running_loop()
    first, second = loop.create_future(), loop.create_future()
    tracker.add_individual((1, 1), first)
    tracker.add_cumulative(MessageId(1, 0), second)
    sent = tracker.take()
    assert [len(p.waiters) for p in sent] == [0, 2]
    assert tracker.take() == []


def test_unacked_wheel_expires_after_the_timeout() -> None:
    """SEM-3.6: a message expires when its bucket is the oldest, ack_timeout/tick ticks later."""
    tracker = UnAckedMessageTracker(ack_timeout=3.0, tick_time=1.0)
    tracker.add(MessageId(1, 1))
    assert tracker.tick() == []
    tracker.add(MessageId(1, 2))
    assert tracker.tick() == []
    assert tracker.tick() == [MessageId(1, 1)]
    assert tracker.tick() == [MessageId(1, 2)]
    assert len(tracker) == 0


def test_unacked_ack_removes_and_cumulative_removes_older() -> None:
    """SEM-3.6: acked messages leave the wheel; a cumulative ack takes all before it."""
    tracker = UnAckedMessageTracker(ack_timeout=1.0, tick_time=1.0)
    for entry in range(5):
        tracker.add(MessageId(1, entry))
    assert tracker.remove(MessageId(1, 4))
    tracker.remove_up_to(MessageId(1, 2))
    assert tracker.tick() == [MessageId(1, 3)]


@pytest.mark.parametrize(("timeout", "tick"), [(0.5, 0.5), (2.0, 3.0), (2.0, 0.0)])
def test_unacked_validation(timeout: float, tick: float) -> None:
    """SEM-1: ack_timeout must be >= 1 s and its tick no longer than it."""
    with pytest.raises(InvalidConfiguration):
        check_ack_timeout(timeout, tick)


def test_nack_redelivers_after_the_delay_in_one_group() -> None:
    """SEM-3.5: nacked messages come due after the nack delay, grouped per tick."""
    clock = Clock()
    tracker = NegativeAcksTracker(1.0, clock=clock)
    tracker.add(MessageId(1, 1))
    clock.now += 0.5
    tracker.add(MessageId(1, 2))
    assert tracker.tick() == []
    clock.now += 0.5
    assert tracker.tick() == [MessageId(1, 1)]
    clock.now += 0.25
    tracker.add(MessageId(1, 3))
    clock.now += 1.0
    assert tracker.tick() == [MessageId(1, 2), MessageId(1, 3)]
    assert len(tracker) == 0
    assert tracker.tick_time == pytest.approx(0.033)


def test_stats_rates_between_snapshots() -> None:
    """The stats recorder logs receive / ack rates since the last interval and the queue size."""
    clock = Clock()
    stats = ConsumerStats(clock)
    stats.received, stats.received_bytes, stats.acked = 100, 1000, 50
    clock.now += 10
    snap = stats.snapshot(queue_size=7)
    assert (snap["receive_rate"], snap["receive_bytes_rate"], snap["ack_rate"]) == (10, 100, 5)
    assert snap["queue_size"] == 7
    stats.received += 20
    clock.now += 2
    assert stats.snapshot(0)["receive_rate"] == 10
