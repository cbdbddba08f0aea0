"""Failover's active-consumer election (SEM-4.2), as pure logic."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from magnetar.broker.dispatchers.failover import choose_active
from tests.support.failover_ring import ring_owner


@dataclass(frozen=True)
class C:
    name: str
    priority_level: int = 0


def _name(chosen: C | None) -> str:
    assert chosen is not None
    return chosen.name


TOPICS = [f"persistent://public/default/t-{i}" for i in range(40)]


def test_priority_beats_name_and_arrival() -> None:
    """SEM-4.2: C1 (priority 1, "aaa") subscribed first and C2 (priority 0,
    "bbb") -> C2 active, on a partition and on a non-partitioned topic."""
    consumers = [C("aaa", 1), C("bbb", 0)]
    for topic in TOPICS:
        assert choose_active(consumers, topic, -1, False) == C("bbb", 0)
    for i in range(2):
        topic = f"persistent://public/default/p-partition-{i}"
        assert _name(choose_active(consumers, topic, i, False)) == "bbb"


def test_partitions_by_index_of_sorted_names() -> None:
    """SEM-4.2 examples: 2 partitions, A B C D -> P0: A, P1: B; 9 partitions,
    A B C -> A gets P0 P3 P6."""
    four = [C("D"), C("B"), C("C"), C("A")]
    assert [_name(choose_active(four, "t", i, False)) for i in range(2)] == ["A", "B"]
    three = [C("C"), C("A"), C("B")]
    picks = [_name(choose_active(three, "t", i, False)) for i in range(9)]
    assert picks == ["A", "B", "C"] * 3


def test_non_partitioned_topic_goes_to_the_ring_owner_whoever_came_first() -> None:
    """SEM-4.2 (amended): the owner of the topic's point on the ring of the
    highest-priority consumers, in any subscription order."""
    names = ["aaa", "bbb", "ccc"]
    owners = set()
    for topic in TOPICS:
        expected = ring_owner(topic, names)
        owners.add(expected)
        for order in itertools.permutations(names):
            chosen = choose_active([C(n) for n in order], topic, -1, False)
            assert chosen is not None and chosen.name == expected
    assert owners == set(names)  # the ring spreads topics over every consumer


def test_lower_priority_consumers_are_not_on_the_ring() -> None:
    for topic in TOPICS:
        consumers = [C("aaa"), C("bbb"), C("zzz", 2)]
        chosen = choose_active(consumers, topic, -1, False)
        assert chosen is not None and chosen.name == ring_owner(topic, ["aaa", "bbb"])


def test_a_leaver_moves_the_topic_only_when_it_owned_it() -> None:
    for topic in TOPICS:
        names = ["aaa", "bbb", "ccc"]
        owner = ring_owner(topic, names)
        for leaver in names:
            rest = [C(n) for n in names if n != leaver]
            chosen = choose_active(rest, topic, -1, False)
            assert chosen is not None
            if leaver != owner:
                assert chosen.name == owner


def test_consistent_hashing_option_puts_partitions_on_the_ring() -> None:
    """SEM-4.2: active_consumer_failover_consistent_hashing uses the ring for
    partitions too, keyed by the partition's own name."""
    names = ["aaa", "bbb", "ccc"]
    for i in range(12):
        topic = f"persistent://public/default/p-partition-{i}"
        chosen = choose_active([C(n) for n in names], topic, i, True)
        assert chosen is not None and chosen.name == ring_owner(topic, names)


def test_no_consumers() -> None:
    assert choose_active([], "t", -1, False) is None
