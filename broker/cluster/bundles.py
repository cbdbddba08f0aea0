"""Namespace bundles: each namespace's 32-bit hash space cut into equal
ranges; a topic belongs to the range its name's hash falls into.

The hash is CRC-32 of the full topic name (a partition hashes on its own
name, so a partitioned topic spreads over bundles). Bundle names follow
Pulsar's ``0x00000000_0x40000000`` form.
"""

from __future__ import annotations

import zlib
from typing import NamedTuple

from magnetar.proto.naming import TopicName

HASH_SPACE = 1 << 32


class Bundle(NamedTuple):
    """One hash range ``[lower, upper)`` of one namespace."""

    namespace: str  # tenant/namespace
    lower: int
    upper: int

    @property
    def range_name(self) -> str:
        upper = min(self.upper, HASH_SPACE - 1)
        return f"0x{self.lower:08x}_0x{upper:08x}"

    def __str__(self) -> str:
        return f"{self.namespace}/{self.range_name}"


def bundles_of(namespace: str, count: int) -> list[Bundle]:
    """The `count` equal ranges of a namespace (the last one takes the rest)."""
    if count < 1:
        raise ValueError("a namespace has at least one bundle")
    step = HASH_SPACE // count
    bounds = [i * step for i in range(count)] + [HASH_SPACE]
    return [Bundle(namespace, bounds[i], bounds[i + 1]) for i in range(count)]


def topic_hash(name: TopicName) -> int:
    return zlib.crc32(str(name).encode())


def bundle_of(name: TopicName, count: int) -> Bundle:
    """The bundle that owns a topic."""
    h = topic_hash(name)
    for bundle in bundles_of(name.namespace_name, count):
        if bundle.lower <= h < bundle.upper:
            return bundle
    raise AssertionError("the ranges cover the hash space")


def parse_range(namespace: str, range_name: str, count: int) -> Bundle:
    """The bundle a ``0x..._0x...`` name denotes; ValueError if it is not one
    of the namespace's bundles."""
    for bundle in bundles_of(namespace, count):
        if bundle.range_name == range_name:
            return bundle
    raise ValueError(f"{range_name!r} is not a bundle of {namespace}")
