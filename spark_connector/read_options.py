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


def _bool_option(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name)
    if raw is None:
        return default
    if raw.lower() not in ("true", "false"):
        raise OptionError(f"option {name}: {raw!r} is not true or false")
    return raw.lower() == "true"


@dataclass(frozen=True)
class ReadOptions:
    service_url: str
    topics: list[str]  # empty with a pattern
    starting_offsets: str = "earliest"
    ending_offsets: str = "latest"
    starting_time: int | None = None
    max_messages_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    client: dict[str, Any] = field(default_factory=dict)
    pattern: TopicsPattern | None = None
    subscription: str | None = None
    reader: dict[str, Any] = field(default_factory=dict)  # the executors' readers

    KNOWN = frozenset({
        "service_url", "topic", "topics", "topics_pattern", "starting_offsets",
        "ending_offsets", "starting_time", "max_messages_per_trigger", "fail_on_data_loss",
        "subscription", "path",
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
        max_messages = _int_option(options, "max_messages_per_trigger")
        if max_messages is not None and max_messages < 1:
            raise OptionError("option max_messages_per_trigger must be at least 1")
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
            max_messages,
            _bool_option(options, "fail_on_data_loss", True),
            client_options(options),
            pattern,
            subscription,
            reader_options(options),
        )
