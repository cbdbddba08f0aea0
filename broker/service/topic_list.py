"""Topic lists for GET_TOPICS_OF_NAMESPACE (Pulsar's TopicList): filtering by
a pattern consumer's regex on the broker, and the hash that lets a client
skip an unchanged list."""

from __future__ import annotations

import re

import crc32c

_PARTITION = "-partition-"


def _without_domain(name: str) -> str:
    return name.split("://", 1)[1] if "://" in name else name


def filter_topics(topics: list[str], pattern: str) -> list[str] | None:
    """The topics whose base name (partition suffix removed) fully matches
    `pattern`, both compared without their domain scheme, as Pulsar does.
    None when the pattern is not a valid regex: the client filters itself."""
    try:
        regex = re.compile(_without_domain(pattern))
    except re.error:
        return None
    return [
        t
        for t in topics
        if regex.fullmatch(_without_domain(t.rsplit(_PARTITION, 1)[0] if _PARTITION in t else t))
    ]


def topics_hash(topics: list[str]) -> str:
    """A stable hash of a topic list (order does not matter)."""
    value = 0
    for name in sorted(topics):
        value = crc32c.crc32c(name.encode() + b"\n", value)
    return f"{value:08x}"
