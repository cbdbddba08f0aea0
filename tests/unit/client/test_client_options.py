"""Each producer, consumer and reader option is written once, as a field of
ProducerConfiguration / ConsumerConfiguration; the facades' official keyword
lists must name those fields and nothing else (issue 47).

`magnetar.client.Client` and `magnetar.client.asyncio.Client` keep the
official client's explicit keywords (test_client_facade_api.py checks their
names, order and defaults against `pulsar`); here each facade's keywords are
checked against the configuration they become, so adding an option to one
side and not the other fails.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from magnetar.client import Client as SyncClient, asyncio as facade_aio
from magnetar.client.aio.config import (
    ConsumerConfiguration,
    ProducerConfiguration,
    facade_keywords,
)
from magnetar.client.aio.policies import BatchReceivePolicy, DeadLetterPolicy

Configuration = type[ProducerConfiguration] | type[ConsumerConfiguration]

# Arguments of the facade methods that are not options.
NOT_OPTIONS = {
    "self",
    "topic",
    "subscription_name",
    "start_message_id",
    "subscription_role_prefix",
    "is_pattern_topic",
}
# A reader's options are the consumer's (renamed by READER_KEYWORDS) but for these.
READER_ONLY = {"reader_listener"}

FACADES: list[tuple[str, Callable[..., Any], Configuration, bool]] = [
    ("Client.create_producer", SyncClient.create_producer, ProducerConfiguration, False),
    ("asyncio.create_producer", facade_aio.Client.create_producer, ProducerConfiguration, False),
    ("Client.subscribe", SyncClient.subscribe, ConsumerConfiguration, False),
    ("asyncio.subscribe", facade_aio.Client.subscribe, ConsumerConfiguration, False),
    ("Client.create_reader", SyncClient.create_reader, ConsumerConfiguration, True),
    ("asyncio.create_reader", facade_aio.Client.create_reader, ConsumerConfiguration, True),
]
IDS = [name for name, *_ in FACADES]

# (facade, option): a default the facade states differently from the field's,
# on purpose (the official blocking client does not batch by default).
DIFFERENT_DEFAULTS = {("Client.create_producer", "batching_enabled")}


def _option_params(fn: Callable[..., Any]) -> tuple[dict[str, inspect.Parameter], bool]:
    """The facade's explicit option parameters, and whether it has a **ours."""
    params = inspect.signature(fn).parameters
    explicit = {
        name: p
        for name, p in params.items()
        if name not in NOT_OPTIONS and p.kind is not inspect.Parameter.VAR_KEYWORD
    }
    return explicit, any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def _renames(cls: Configuration, reader: bool) -> Mapping[str, str]:
    if reader:
        return {**cls.KEYWORDS, **ConsumerConfiguration.READER_KEYWORDS}
    return cls.KEYWORDS


def _settable(cls: Configuration) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)} - cls.INTERNAL


def drift(fn: Callable[..., Any], cls: Configuration, reader: bool = False) -> list[str]:
    """What parts a facade's keywords and the configuration's fields."""
    explicit, has_ours = _option_params(fn)
    renames = _renames(cls, reader)
    ignored = READER_ONLY if reader else set()
    fields = {renames.get(name, name) for name in explicit if name not in ignored}
    problems = [f"{name}: no such field" for name in sorted(fields - _settable(cls))]
    if not reader and not has_ours:
        # Without a **ours, every field must be an explicit keyword.
        problems += [f"{name}: no keyword" for name in sorted(_settable(cls) - fields)]
    return problems


@pytest.mark.parametrize(("name", "fn", "cls", "reader"), FACADES, ids=IDS)
def test_facade_keywords_are_the_configuration_fields(
    name: str, fn: Callable[..., Any], cls: Configuration, reader: bool
) -> None:
    assert drift(fn, cls, reader) == [], name


@pytest.mark.parametrize(("name", "fn", "cls", "reader"), FACADES, ids=IDS)
def test_facade_defaults_are_the_configuration_defaults(
    name: str, fn: Callable[..., Any], cls: Configuration, reader: bool
) -> None:
    """A facade called with its defaults makes the default configuration."""
    explicit, _ = _option_params(fn)
    defaults = {option: p.default for option, p in explicit.items()}
    made: ProducerConfiguration | ConsumerConfiguration
    if reader:
        made = ConsumerConfiguration.from_reader_keywords(defaults)
    else:
        made = cls.from_keywords(defaults)
    expected = cls()
    for field in dataclasses.fields(cls):
        option = {v: k for k, v in _renames(cls, reader).items()}.get(field.name, field.name)
        if (name, option) in DIFFERENT_DEFAULTS:
            assert getattr(made, field.name) != getattr(expected, field.name)
            continue
        assert getattr(made, field.name) == getattr(expected, field.name), (name, field.name)


def test_every_field_but_the_internal_ones_is_an_official_or_extra_keyword() -> None:
    """The options the facades take through **ours: the fields no explicit
    keyword names, each settable through from_keywords."""
    explicit, _ = _option_params(SyncClient.create_producer)
    extras = _settable(ProducerConfiguration) - {
        ProducerConfiguration.KEYWORDS.get(n, n) for n in explicit
    }
    assert extras == {"chunk_max_message_size", "hashing_scheme"}
    conf = ProducerConfiguration.from_keywords({"chunk_max_message_size": 5})
    assert conf.chunk_max_message_size == 5


def test_drift_is_found_both_ways() -> None:
    """A keyword without a field, and (for a facade without **ours) a field
    without a keyword, are reported."""

    def extra_keyword(self: Any, topic: str, producer_nickname: str = "", **ours: Any) -> None:
        pass

    assert drift(extra_keyword, ProducerConfiguration) == ["producer_nickname: no such field"]

    def missing_keyword(self: Any, topic: str, producer_name: str | None = None) -> None:
        pass

    problems = drift(missing_keyword, ProducerConfiguration)
    assert "send_timeout_millis: no keyword" in problems
    assert "producer_name: no keyword" not in problems


def test_unknown_and_internal_keywords_are_refused() -> None:
    for keywords in ({"bogus": 1}, {"encryption_keys": ("a",)}):
        with pytest.raises(TypeError, match="unexpected keyword argument"):
            ProducerConfiguration.from_keywords(keywords)
    for name in ConsumerConfiguration.INTERNAL:
        with pytest.raises(TypeError, match=name):
            ConsumerConfiguration.from_keywords({name: None})


def test_official_values_are_converted() -> None:
    producer = ProducerConfiguration.from_keywords({"encryption_key": "k", "properties": None})
    assert producer.encryption_keys == ("k",) and producer.properties == {}
    consumer = ConsumerConfiguration.from_keywords(
        {
            "batch_receive_policy": BatchReceivePolicy(5, 100, 10),
            "dead_letter_policy": DeadLetterPolicy(3),
            "key_shared_policy": None,
        }
    )
    assert consumer.batch_receive_policy == BatchReceivePolicy(5, 100, 10)
    assert consumer.dead_letter_policy == DeadLetterPolicy(3)
    reader = ConsumerConfiguration.from_reader_keywords({"reader_name": "r"})
    assert reader.consumer_name == "r"


def test_facade_keywords_take_the_arguments_and_ours() -> None:
    arguments = {"self": object(), "topic": "t", "producer_name": "p", "ours": {"x": 1}}
    assert facade_keywords(arguments, "topic") == {"producer_name": "p", "x": 1}
