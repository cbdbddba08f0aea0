"""SEM-4.2's hash ring, computed independently of the broker's code, so tests
can say which Failover consumer a non-partitioned topic goes to."""

from __future__ import annotations

import mmh3

_MASK_31 = 0x7FFFFFFF


def _hash(text: str) -> int:
    return mmh3.hash(text.encode(), 0, False) & _MASK_31


def ring_owner(topic: str, names: list[str]) -> str:
    """The name owning the first ring point at or after the topic's hash
    (wrapping): the smallest clockwise distance. On a shared point the name
    later in sorted order wins, as it is put on the ring last."""
    target = _hash(topic)
    best: tuple[int, int] | None = None
    owner = ""
    for rank, name in enumerate(sorted(names)):
        for j in range(100):
            distance = (_hash(f"{name}{j}") - target) % (1 << 31)
            key = (distance, -rank)
            if best is None or key < best:
                best, owner = key, name
    return owner
