"""Shared dispatch selection (SEM-4.3) and redelivery bookkeeping, on real
broker Consumer objects attached to a recording connection."""

from __future__ import annotations

from magnetar.broker.dispatchers.consumer import Consumer, SubType
from magnetar.broker.dispatchers.redelivery import RedeliveryTracker, ReplayQueue
from magnetar.broker.dispatchers.shared import RoundRobinSelector
from magnetar.broker.storage.api import Entry, Position
from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.frames import FrameDecoder, Payload
from tests.unit.broker.recording import RecordingConnection


def _consumer(
    name: str, priority: int, permits: int, cnx: RecordingConnection | None = None
) -> Consumer:
    consumer = Consumer(
        "s",
        consumer_id=int(name[1:]),
        name=name,
        sub_type=SubType.Shared,
        cnx=cnx or RecordingConnection(),
        priority_level=priority,
    )
    consumer.flow(permits)
    return consumer


def _drain(selector: RoundRobinSelector, cost: int = 1) -> list[str]:
    order: list[str] = []
    while (consumer := selector.select(cost)) is not None:
        consumer.permits -= cost
        order.append(consumer.name)
    return order


def test_sem_4_3_worked_example_order() -> None:
    """SEM-4.3: C1 (0, 2 permits), C2 (0, 1), C3 (0, 1), C4 (1, 2), C5 (1, 1)
    receive C1, C2, C3, C1, C4, C5, C4."""
    selector = RoundRobinSelector()
    for name, priority, permits in [
        ("C1", 0, 2),
        ("C2", 0, 1),
        ("C3", 0, 1),
        ("C4", 1, 2),
        ("C5", 1, 1),
    ]:
        selector.add(_consumer(name, priority, permits))
    assert _drain(selector) == ["C1", "C2", "C3", "C1", "C4", "C5", "C4"]


def test_join_order_not_priority_order_of_adding() -> None:
    """SEM-4.3: a lower level is used only while every higher-level consumer is out."""
    selector = RoundRobinSelector()
    low = _consumer("C9", 1, 5)
    selector.add(low)
    high = _consumer("C1", 0, 1)
    selector.add(high)
    assert selector.select(1) is high
    high.permits = 0
    assert selector.select(1) is low
    high.flow(1)
    assert selector.select(1) is high


def test_batch_cost_needs_enough_permits() -> None:
    """SEM-2.2: a batch entry of n messages goes to a consumer with n permits;
    only when none has enough may one with positive permits overdraw (Pulsar's rule)."""
    selector = RoundRobinSelector()
    small = _consumer("C1", 0, 10)
    small.permits -= 7  # 3 of its 10 left
    big = _consumer("C2", 0, 10)
    selector.add(small)
    selector.add(big)
    assert selector.select(5) is big
    assert selector.select(3) is small
    chosen = selector.select(11)  # nobody has 11: one with positive permits overdraws
    assert chosen in (small, big)
    small.permits = 0
    big.permits = 0
    assert selector.select(11) is None  # no permits at all: wait for FLOW
    big.permits = -2
    small.flow(1)
    assert selector.select(11) is small


def test_unwritable_consumer_is_skipped() -> None:
    blocked = RecordingConnection(writable=False)
    selector = RoundRobinSelector()
    c1 = _consumer("C1", 0, 5, blocked)
    c2 = _consumer("C2", 0, 5)
    selector.add(c1)
    selector.add(c2)
    assert [selector.select(1), selector.select(1)] == [c2, c2]
    assert selector.available_permits() == 5
    blocked.writable = True
    assert selector.select(1) is c1


def test_removal_keeps_round_robin_turn() -> None:
    selector = RoundRobinSelector()
    consumers = [_consumer(f"C{i}", 0, 10) for i in (1, 2, 3)]
    for consumer in consumers:
        selector.add(consumer)
    assert selector.select(1) is consumers[0]
    selector.remove(consumers[0])
    assert selector.select(1) is consumers[1]
    assert selector.select(1) is consumers[2]
    selector.remove(consumers[1])
    selector.remove(consumers[2])
    assert selector.select(1) is None


def test_consumer_message_frames_and_pending_acks() -> None:
    """MESSAGE carries the stored bytes, the id (with partition) and the
    redelivery count; permits drop by the entry's message count (SEM-2.2)."""
    cnx = RecordingConnection()
    consumer = Consumer(
        "s",
        consumer_id=7,
        name="c",
        sub_type=SubType.Exclusive,
        cnx=cnx,
        partition_index=3,
    )
    consumer.flow(10)
    stored = Payload.build(
        pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1), b"hello"
    ).data
    entries = [Entry(Position(5, 0), stored, 1), Entry(Position(5, 1), stored, 4)]
    sent = consumer.send_entries(entries, lambda p: 2 if p.entry_id == 1 else 0)
    assert sent == 5
    assert consumer.permits == 5
    assert consumer.pending_acks == {Position(5, 0): 1, Position(5, 1): 4}
    decoder = FrameDecoder()
    decoder.feed(b"".join(cnx.frames))
    frames = list(decoder)
    assert [f.payload.data if f.payload else None for f in frames] == [stored, stored]
    first, second = (f.command.message for f in frames)
    assert (first.message_id.ledgerId, first.message_id.entryId) == (5, 0)
    assert first.message_id.partition == 3
    assert first.redelivery_count == 0
    assert second.redelivery_count == 2
    assert consumer.remove_pending([Position(5, 0), Position(9, 9)]) == [Position(5, 0)]
    assert consumer.take_pending() == [Position(5, 1)]


def test_redelivery_tracker_counts_and_forgets() -> None:
    """SEM-3.8: counts per position; acked positions are forgotten."""
    tracker = RedeliveryTracker()
    a, b, c = Position(1, 0), Position(1, 1), Position(2, 0)
    assert tracker.get(a) == 0
    assert tracker.increment(a) == 1
    assert tracker.increment(a) == 2
    tracker.increment(b)
    tracker.increment(c)
    tracker.remove(b)
    assert tracker.get(b) == 0
    tracker.remove_up_to(Position(1, 5))
    assert (tracker.get(a), tracker.get(c)) == (0, 1)


def test_replay_queue_orders_and_dedups() -> None:
    queue = ReplayQueue()
    queue.add_all([Position(2, 0), Position(1, 5), Position(1, 5), Position(1, 1)])
    assert len(queue) == 3
    queue.discard_up_to(Position(1, 1))
    assert queue.take(10) == [Position(1, 5), Position(2, 0)]
    assert not queue
