"""Key_Shared selectors (SEM-4.4.1 to 4.4.3) on real broker Consumer objects:
the worked examples of SEMANTICS 4.4, exactly."""

from __future__ import annotations

from typing import Any

import pytest

from magnetar.broker.dispatchers.consumer import Consumer, KeySharedMode, KeySharedPolicy, SubType
from magnetar.broker.dispatchers.entries import NON_KEY, key_hash_and_deliver_at
from magnetar.broker.dispatchers.selectors import (
    AutoSplitSelector,
    ConsistentHashingSelector,
    StickySelector,
    ring_points,
)
from magnetar.broker.errors import ConsumerAssignError
from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.errors import ServerError
from magnetar.proto.frames import Payload
from magnetar.proto.hashes import key_shared_slot, murmur3_32
from tests.unit.broker.recording import RecordingConnection


def _consumer(name: str, ranges: tuple[tuple[int, int], ...] = ()) -> Consumer:
    policy = KeySharedPolicy(
        mode=KeySharedMode.STICKY if ranges else KeySharedMode.AUTO_SPLIT, hash_ranges=ranges
    )
    return Consumer("s", 1, name, SubType.Key_Shared, RecordingConnection(), key_shared=policy)


def _named_ranges(selector: AutoSplitSelector | StickySelector) -> dict[str, list[tuple[int, int]]]:
    return {c.name: r for c, r in selector.ranges().items()}


def test_sem_4_4_1_worked_example_join_order() -> None:
    """SEM-4.4.1: C1..C4 joined in order -> C3 [0,16384), C2 [16384,32768),
    C4 [32768,49152), C1 [49152,65536) (inclusive ends on the wire)."""
    selector = AutoSplitSelector()
    for name in ("C1", "C2", "C3", "C4"):
        selector.add_consumer(_consumer(name))
    assert _named_ranges(selector) == {
        "C3": [(0, 16383)],
        "C2": [(16384, 32767)],
        "C4": [(32768, 49151)],
        "C1": [(49152, 65535)],
    }


def test_sem_4_4_1_worked_example_key_and_leave() -> None:
    """SEM-4.4.1: "Order-3459134" hashes to 3112179635, slot 6067 -> C3;
    C4 leaves -> C1 owns [32768,65536)."""
    selector = AutoSplitSelector()
    consumers = {name: _consumer(name) for name in ("C1", "C2", "C3", "C4")}
    for consumer in consumers.values():
        selector.add_consumer(consumer)
    key_hash = murmur3_32("Order-3459134")
    assert key_hash == 3112179635
    assert key_shared_slot("Order-3459134") == 6067
    assert selector.select(key_hash) is consumers["C3"]
    selector.remove_consumer(consumers["C4"])
    assert _named_ranges(selector)["C1"] == [(32768, 65535)]
    for slot in (32768, 40000, 49151, 49152, 65535):
        assert selector.select(slot) is consumers["C1"]


def test_sem_4_4_1_last_range_merges_left() -> None:
    """SEM-4.4.1: a leaver that owned the last range merges into its left neighbour."""
    selector = AutoSplitSelector()
    c1, c2 = _consumer("C1"), _consumer("C2")
    selector.add_consumer(c1)
    selector.add_consumer(c2)  # C2 [0,32767], C1 [32768,65535]
    selector.remove_consumer(c1)
    assert _named_ranges(selector) == {"C2": [(0, 65535)]}
    selector.remove_consumer(c2)
    assert selector.select(0) is None


def test_sem_4_4_2_ring_points_worked_example() -> None:
    """SEM-4.4.2: points of "orders-aggregator-pod-2345-consumer": i=1 -> 1003084738,
    i=2 -> 373317202, i=100 -> 320276078."""
    points = ring_points("orders-aggregator-pod-2345-consumer")
    assert len(points) == 100
    assert points[0] == 1003084738
    assert points[1] == 373317202
    assert points[99] == 320276078


def test_sem_4_4_2_first_point_clockwise_and_shared_points() -> None:
    """SEM-4.4.2: a key maps to the first point at or after its hash (wrapping);
    a point shared by several consumers resolves by hash mod their count."""
    selector = ConsistentHashingSelector(points_per_consumer=100)
    a, b = _consumer("alpha"), _consumer("beta")
    selector.add_consumer(a)
    selector.add_consumer(b)
    owner_of = {p: a for p in ring_points("alpha")} | {p: b for p in ring_points("beta")}
    ring = sorted(owner_of)
    for point in ring[:10]:
        assert selector.select(point) is owner_of[point]
        assert selector.select(point - 1) is owner_of[point]
    assert selector.select(ring[-1] + 1) is owner_of[ring[0]]  # wraps around
    # Two consumers of the same name share every point.
    twin = _consumer("alpha")
    selector.add_consumer(twin)
    point = ring_points("alpha")[0]
    assert selector.select(point) is [a, twin][point % 2]
    selector.remove_consumer(a)
    selector.remove_consumer(twin)
    assert all(selector.select(p) is b for p in ring)


def test_sem_4_4_3_sticky_routes_declared_ranges() -> None:
    """SEM-4.4.3: [0,30000] and [30001,65535] route as declared; an overlapping
    third consumer is refused and nothing changes."""
    selector = StickySelector()
    first, second = _consumer("A", ((0, 30000),)), _consumer("B", ((30001, 65535),))
    selector.add_consumer(first)
    selector.add_consumer(second)
    assert selector.select(0) is first and selector.select(30000) is first
    assert selector.select(30001) is second and selector.select(65535) is second
    before = selector.ranges()
    with pytest.raises(ConsumerAssignError) as refused:
        selector.add_consumer(_consumer("C", ((29000, 29999),)))
    assert refused.value.code == ServerError.ConsumerAssignError
    assert selector.ranges() == before


@pytest.mark.parametrize(
    "ranges",
    [(), ((5, 4),), ((0, 65536),), ((0, 10), (10, 20))],
    ids=["none", "reversed", "out-of-space", "self-overlap"],
)
def test_sem_4_4_3_sticky_refuses_bad_ranges(ranges: tuple[tuple[int, int], ...]) -> None:
    """SEM-4.4.3: a consumer with no ranges or invalid ones is refused."""
    selector = StickySelector()
    consumer = Consumer(
        "s",
        1,
        "bad",
        SubType.Key_Shared,
        RecordingConnection(),
        key_shared=KeySharedPolicy(mode=KeySharedMode.STICKY, hash_ranges=ranges),
    )
    with pytest.raises(ConsumerAssignError):
        selector.add_consumer(consumer)
    assert selector.ranges() == {}


def test_sem_4_4_3_gap_has_no_owner() -> None:
    """SEM-4.4.3: a slot nobody declared has no consumer (its messages wait)."""
    selector = StickySelector()
    selector.add_consumer(_consumer("A", ((100, 200), (300, 400))))
    assert selector.select(250) is None and selector.select(99) is None
    assert selector.select(100) is not None and selector.select(400) is not None


def _entry_data(**meta: Any) -> bytes:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1, **meta)
    return Payload.build(metadata, b"x").data


def test_sem_4_4_key_choice() -> None:
    """SEM-4.4: ordering key, else partition key, else the NON_KEY bucket."""
    assert key_hash_and_deliver_at(_entry_data()) == (murmur3_32(NON_KEY), 0)
    assert key_hash_and_deliver_at(_entry_data(partition_key="k1"))[0] == murmur3_32("k1")
    both = _entry_data(partition_key="k1", ordering_key=b"o1", deliver_at_time=42)
    assert key_hash_and_deliver_at(both) == (murmur3_32(b"o1"), 42)
