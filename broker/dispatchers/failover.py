"""Failover's choice of the active consumer (SEM-4.2), for persistent and
non-persistent topics alike.

Consumers are ranked by priority level (0 first), then by name; only the
highest-priority ones take part. A partition i goes to the one at index
(i mod n) of that list. A non-partitioned topic (and every topic when the
broker option `active_consumer_failover_consistent_hashing` is on) goes to the
owner of a point on a hash ring: each candidate puts 100 points at
murmur3(name + str(j)), and the topic takes the first point at or after
murmur3(topic name), wrapping to the lowest. Both hashes are masked to 31
bits, as Pulsar's broker computes them, so the choice matches a Pulsar
broker's for the same names, whoever subscribed first.

Pure logic, no I/O.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Protocol, TypeVar

from magnetar.proto.hashes import murmur3_32_hash

FAILOVER_RING_POINTS = 100


class Candidate(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def priority_level(self) -> int: ...


C = TypeVar("C", bound=Candidate)


def choose_active(
    consumers: Sequence[C], topic_name: str, partition_index: int, consistent_hashing: bool
) -> C | None:
    """The active consumer among `consumers` (None when there are none)."""
    if not consumers:
        return None
    top = min(c.priority_level for c in consumers)
    # sorted() is stable: equal names keep their subscription order.
    ranked = sorted((c for c in consumers if c.priority_level == top), key=lambda c: c.name)
    if partition_index >= 0 and not consistent_hashing:
        return ranked[partition_index % len(ranked)]
    return ranked[_ring_index(ranked, topic_name)]


def _ring_index(ranked: Sequence[Candidate], topic_name: str) -> int:
    ring: dict[int, int] = {}
    for index, consumer in enumerate(ranked):
        for j in range(FAILOVER_RING_POINTS):
            # A later consumer takes a point two consumers hash to (as a map put).
            ring[murmur3_32_hash(f"{consumer.name}{j}")] = index
    points = sorted(ring)
    at = bisect.bisect_left(points, murmur3_32_hash(topic_name))
    return ring[points[at % len(points)]]
