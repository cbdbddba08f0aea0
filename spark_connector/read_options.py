"""The options of `spark.read` / `spark.readStream` `.format("magnetar")`,
checked with a clear error naming the option."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from magnetar.client import RegexSubscriptionMode
from magnetar.spark_connector.options import (
    CLIENT_PREFIX,
    READER_PREFIX,
    OptionError,
    client_options,
    reader_options,
)

DEFAULT_NAMESPACE = "public/default"
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60_000  # as Kafka's maxTriggerDelay
_PARTITION = "-partition-"


@dataclass(frozen=True)
class TopicsPattern:
    """`topics_pattern`: a regex over the topic names of one namespace."""

    namespace: str  # tenant/namespace
    regex: re.Pattern[str]
    mode: RegexSubscriptionMode

    @classmethod
    def parse(cls, raw: str) -> TopicsPattern:
        """`persistent://tenant/ns/<regex>`, `tenant/ns/<regex>`, or a bare
        regex over public/default (Pulsar's forms)."""
        domain, sep, rest = raw.partition("://")
        if not sep:
            domain, rest = "persistent", raw
        if domain not in ("persistent", "non-persistent"):
            raise OptionError(f"option topics_pattern: unknown domain {domain}:// in {raw!r}")
        parts = rest.split("/", 2)
        if len(parts) == 3:
            namespace, expression = f"{parts[0]}/{parts[1]}", parts[2]
        elif sep:
            raise OptionError(f"option topics_pattern: {raw!r} must name tenant/namespace/")
        else:
            namespace, expression = DEFAULT_NAMESPACE, rest
        try:
            regex = re.compile(expression)
        except re.error as exc:
            raise OptionError(f"option topics_pattern: {expression!r} is no regex: {exc}") from None
        mode = (
            RegexSubscriptionMode.PersistentOnly
            if domain == "persistent"
            else RegexSubscriptionMode.NonPersistentOnly
        )
        return cls(namespace, regex, mode)

    def matches(self, listed: str) -> bool:
        """Whether a listed topic (or partition) belongs: its local name, without
        the partition suffix, matches the whole regex."""
        local = listed.split("://", 1)[-1].split("/", 2)[-1]
        base, sep, index = local.rpartition(_PARTITION)
        return self.regex.fullmatch(base if sep and index.isdigit() else local) is not None


def _int_option(options: Mapping[str, str], name: str) -> int | None:
    raw = options.get(name)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        raise OptionError(f"option {name}: {raw!r} is not an integer") from None


def _count_option(options: Mapping[str, str], name: str) -> int | None:
    """A positive integer option (a number of messages or bytes)."""
    value = _int_option(options, name)
    if value is not None and value < 1:
        raise OptionError(f"option {name} must be at least 1, not {value}")
    return value


# A duration: whole milliseconds, or a whole number with one of these units
# (Spark's time strings, as Kafka's maxTriggerDelay takes them).
_DURATION = re.compile(r"(\d+)\s*(ms|s|m|min|h|d)?")
_UNIT_MS = {None: 1, "ms": 1, "s": 1_000, "m": 60_000, "min": 60_000, "h": 3_600_000}
_UNIT_MS["d"] = 24 * _UNIT_MS["h"]


def duration_ms(name: str, raw: str) -> int:
    """`raw` ("250", "250ms", "30s", "5m", "1h", ...) in milliseconds."""
    found = _DURATION.fullmatch(raw.strip().lower())
    if found is None:
        raise OptionError(
            f"option {name}: {raw!r} is not a duration (whole ms, or a whole number "
            "with one of the units ms, s, m, min, h, d, e.g. 30s)"
        )
    return int(found[1]) * _UNIT_MS[found[2]]


def _bool_option(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name)
    if raw is None:
        return default
    if raw.lower() not in ("true", "false"):
        raise OptionError(f"option {name}: {raw!r} is not true or false")
    return raw.lower() == "true"


@dataclass(frozen=True)
class TriggerLimits:
    """How much a stream's micro-batch reads: the options
    max_messages_per_trigger, max_bytes_per_trigger, min_messages_per_trigger
    and max_trigger_delay (None: no such limit)."""

    max_messages: int | None = None
    max_bytes: int | None = None
    min_messages: int | None = None
    max_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> TriggerLimits:
        """The options, checked alone and together."""
        max_messages = _count_option(options, "max_messages_per_trigger")
        min_messages = _count_option(options, "min_messages_per_trigger")
        raw_delay = options.get("max_trigger_delay")
        if raw_delay is not None and min_messages is None:
            raise OptionError(
                "option max_trigger_delay bounds the wait for min_messages_per_trigger: "
                "give min_messages_per_trigger too"
            )
        if min_messages is not None and max_messages is not None and min_messages > max_messages:
            raise OptionError(
                f"option min_messages_per_trigger ({min_messages}) is more than "
                f"max_messages_per_trigger ({max_messages}): no micro-batch could have both"
            )
        return cls(
            max_messages,
            _count_option(options, "max_bytes_per_trigger"),
            min_messages,
            (
                DEFAULT_MAX_TRIGGER_DELAY_MS
                if raw_delay is None
                else duration_ms("max_trigger_delay", raw_delay)
            ),
        )


@dataclass(frozen=True)
class ReadOptions:
    service_url: str
    topics: list[str]  # empty with a pattern
    starting_offsets: str = "earliest"
    ending_offsets: str = "latest"
    starting_time: int | None = None
    limits: TriggerLimits = field(default_factory=TriggerLimits)
    fail_on_data_loss: bool = True
    client: dict[str, Any] = field(default_factory=dict)
    pattern: TopicsPattern | None = None
    subscription: str | None = None
    reader: dict[str, Any] = field(default_factory=dict)  # the executors' readers

    KNOWN = frozenset({
        "service_url", "topic", "topics", "topics_pattern", "starting_offsets",
        "ending_offsets", "starting_time", "max_messages_per_trigger", "max_bytes_per_trigger",
        "min_messages_per_trigger", "max_trigger_delay", "fail_on_data_loss", "subscription",
        "path",
    })  # fmt: skip

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReadOptions:
        prefixes = (CLIENT_PREFIX, READER_PREFIX)
        unknown = [o for o in options if o not in cls.KNOWN and not o.startswith(prefixes)]
        if unknown:
            raise OptionError(f"unknown option(s) for reading: {', '.join(sorted(unknown))}")
        service_url = options.get("service_url")
        if not service_url:
            raise OptionError("option service_url is required (e.g. pulsar://localhost:6650)")
        chosen = [k for k in ("topic", "topics", "topics_pattern") if options.get(k)]
        if len(chosen) != 1:
            raise OptionError("give exactly one of the options topic, topics, topics_pattern")
        pattern = None
        topics: list[str] = []
        if chosen[0] == "topics_pattern":
            pattern = TopicsPattern.parse(options["topics_pattern"])
        else:
            topics = [t.strip() for t in options[chosen[0]].split(",") if t.strip()]
        starting_time = _int_option(options, "starting_time")
        if starting_time is not None:
            if starting_time < 0:
                raise OptionError("option starting_time: ms since the epoch, not negative")
            if "starting_offsets" in options:
                raise OptionError(
                    "options starting_time and starting_offsets exclude each other: give one"
                )
        subscription = options.get("subscription")
        if subscription is not None and not subscription.strip():
            raise OptionError("option subscription: give a subscription name")
        return cls(
            service_url,
            topics,
            options.get("starting_offsets", "earliest"),
            options.get("ending_offsets", "latest"),
            starting_time,
            TriggerLimits.parse(options),
            _bool_option(options, "fail_on_data_loss", True),
            client_options(options),
            pattern,
            subscription,
            reader_options(options),
        )
