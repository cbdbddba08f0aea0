"""Topic names: `my-topic` -> `persistent://public/default/my-topic`.

A full name is `{domain}://{tenant}/{namespace}/{local}`; partitions of a
partitioned topic are `{name}-partition-{i}`. Parsing raises InvalidTopicName
with the reason, which brokers map to ServerError.InvalidTopicName.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import final

from magnetar.proto.errors import UsageError

PERSISTENT = "persistent"
NON_PERSISTENT = "non-persistent"
DEFAULT_TENANT = "public"
DEFAULT_NAMESPACE = "default"
PARTITION_SUFFIX = "-partition-"

_NAME_PART = re.compile(r"^[-=:.\w]+$")
# Bounds we choose (Pulsar sets none): long enough for any real name, short
# enough that a name never turns into an unbounded file or path component.
MAX_NAME_PART = 255
MAX_SUBSCRIPTION_NAME = 1024
MAX_PRODUCER_NAME = 1024
_PARTITION = re.compile(r"^(?P<base>.+)-partition-(?P<index>\d+)$")


class InvalidTopicName(UsageError, ValueError):
    """A topic name that does not parse; the message says why."""


class InvalidName(UsageError, ValueError):
    """A subscription, producer or consumer name the broker refuses. Pulsar's
    broker answers these (a NamingException) with ServerError.InvalidTopicName."""


@dataclass(frozen=True, slots=True)
@final
class TopicName:
    domain: str
    tenant: str
    namespace: str
    local_name: str

    @classmethod
    def parse(cls, name: str) -> TopicName:
        # A client names a topic in PARTITIONED_METADATA, LOOKUP and PRODUCER
        # alike: the checks run once per name (the result is immutable).
        parsed = _PARSED.get(name)
        if parsed is not None:
            return parsed
        parsed = cls._parse(name)
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        _PARSED[name] = parsed
        return parsed

    @classmethod
    def _parse(cls, name: str) -> TopicName:
        if not name or not name.strip():
            raise InvalidTopicName("topic name is empty")
        if "://" in name:
            domain, _, rest = name.partition("://")
            if domain not in (PERSISTENT, NON_PERSISTENT):
                raise InvalidTopicName(f"{name!r}: domain must be persistent or non-persistent")
            parts = rest.split("/")
            if len(parts) != 3:
                raise InvalidTopicName(f"{name!r}: expected {domain}://tenant/namespace/topic")
            tenant, namespace, local = parts
        else:
            domain = PERSISTENT
            parts = name.split("/")
            if len(parts) == 1:
                tenant, namespace, local = DEFAULT_TENANT, DEFAULT_NAMESPACE, parts[0]
            elif len(parts) == 3:
                tenant, namespace, local = parts
            else:
                raise InvalidTopicName(
                    f"{name!r}: a short name is 'topic' or 'tenant/namespace/topic'"
                )
        for label, value in (("tenant", tenant), ("namespace", namespace), ("topic", local)):
            if not value:
                raise InvalidTopicName(f"{name!r}: {label} is empty")
            if len(value) > MAX_NAME_PART:
                raise InvalidTopicName(
                    f"{label} name of {len(value)} characters: at most {MAX_NAME_PART} are allowed"
                )
            if label == "topic":
                # Pulsar checks only the tenant and namespace by pattern; a
                # local name may hold any printable character but "/"
                # (storage and metadata paths percent-encode it).
                if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value) or value in (".", ".."):
                    raise InvalidTopicName(f"{name!r}: topic {value!r} is not allowed")
            elif not _NAME_PART.match(value) or value in (".", ".."):
                raise InvalidTopicName(f"{name!r}: {label} {value!r} has characters not allowed")
        return cls(domain, tenant, namespace, local)

    @property
    def persistent(self) -> bool:
        return self.domain == PERSISTENT

    @property
    def namespace_name(self) -> str:
        """`tenant/namespace`, as GET_TOPICS_OF_NAMESPACE names it."""
        return f"{self.tenant}/{self.namespace}"

    @property
    def partition_index(self) -> int:
        """The partition number, or -1 when this is not a partition's name."""
        if PARTITION_SUFFIX not in self.local_name:
            return -1  # asked several times per topic load; the pattern is slower
        match = _PARTITION.match(self.local_name)
        return int(match.group("index")) if match else -1

    @property
    def partitioned_base(self) -> TopicName:
        """The partitioned topic this partition belongs to (itself when not a partition)."""
        match = _PARTITION.match(self.local_name)
        if not match:
            return self
        return TopicName(self.domain, self.tenant, self.namespace, match.group("base"))

    def partition(self, index: int) -> TopicName:
        if index < 0:
            raise InvalidTopicName(f"partition index {index} is negative")
        return TopicName(
            self.domain, self.tenant, self.namespace, f"{self.local_name}{PARTITION_SUFFIX}{index}"
        )

    @property
    def rest_path(self) -> str:
        """`{domain}/{tenant}/{namespace}/{topic}` as the admin and lookup HTTP paths use."""
        return f"{self.domain}/{self.tenant}/{self.namespace}/{self.local_name}"

    def __str__(self) -> str:
        return f"{self.domain}://{self.tenant}/{self.namespace}/{self.local_name}"


# Names parsed lately (TopicName.parse); cleared whole when full.
_PARSED: dict[str, TopicName] = {}
_PARSED_MAX = 4096


def full_topic_name(name: str) -> str:
    """Normalise a user-given topic name to its full form."""
    return str(TopicName.parse(name))


def _check_text(kind: str, value: str, limit: int) -> None:
    if len(value) > limit:
        raise InvalidName(f"{kind} of {len(value)} characters: at most {limit} are allowed")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        raise InvalidName(f"{kind} {value!r} has control characters")


def validate_subscription_name(name: str) -> None:
    """Any text but empty (Pulsar: "Empty subscription name"), over-long, or
    with control characters."""
    if not name or not name.strip():
        raise InvalidName("Empty subscription name")
    _check_text("subscription name", name, MAX_SUBSCRIPTION_NAME)


def validate_producer_name(name: str) -> None:
    """An empty producer name means the broker assigns one."""
    _check_text("producer name", name, MAX_PRODUCER_NAME)


def validate_consumer_name(name: str) -> None:
    """An empty consumer name means the broker assigns one."""
    _check_text("consumer name", name, MAX_PRODUCER_NAME)
