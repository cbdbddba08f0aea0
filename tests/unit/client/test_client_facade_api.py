"""The blocking API mirrors the official client's names and defaults.

An application switches by changing its import, so every keyword the
official `pulsar` module takes must exist here with the same default.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pulsar
import pytest

import magnetar.client as ours
from magnetar.client import aio

# Defaults that are objects in the official module and None (meaning the same) here.
_SAME_MEANING = {"schema"}


def _params(fn: Callable[..., Any]) -> dict[str, Any]:
    return {
        name: p.default
        for name, p in inspect.signature(fn).parameters.items()
        if name != "self" and p.kind is not inspect.Parameter.VAR_KEYWORD
    }


def _comparable(value: Any) -> Any:
    return int(value) if hasattr(value, "__int__") and not isinstance(value, bool) else value


@pytest.mark.parametrize(
    ("official", "mine"),
    [
        (pulsar.Client.__init__, ours.Client.__init__),
        (pulsar.Client.create_producer, ours.Client.create_producer),
        (pulsar.Producer.send, ours.Producer.send),
        (pulsar.Producer.send_async, ours.Producer.send_async),
        (pulsar.Consumer.receive, ours.Consumer.receive),
        (pulsar.Client.subscribe, ours.Client.subscribe),
        (pulsar.Client.create_reader, ours.Client.create_reader),
        (pulsar.Reader.read_next, ours.Reader.read_next),
        (pulsar.Client.create_table_view, ours.Client.create_table_view),
    ],
    ids=[
        "Client",
        "create_producer",
        "send",
        "send_async",
        "receive",
        "subscribe",
        "create_reader",
        "read_next",
        "create_table_view",
    ],
)
def test_same_keywords_and_defaults(official: Callable[..., Any], mine: Callable[..., Any]) -> None:
    theirs = _params(official)
    mine_params = _params(mine)
    assert list(mine_params)[: len(theirs)] == list(theirs), "same names, same order"
    for name, default in theirs.items():
        if name in _SAME_MEANING:
            continue
        assert _comparable(mine_params[name]) == _comparable(default), name


def test_enums_match_the_official_values() -> None:
    for name in ("CompressionType", "PartitionsRoutingMode", "BatchingType",
                 "ProducerAccessMode", "ConsumerType", "InitialPosition"):  # fmt: skip
        official = {k: int(v) for k, v in getattr(pulsar, name).__members__.items()}
        assert {m.name: m.value for m in getattr(ours, name)} == official, name


def test_async_create_producer_batches_by_default_like_pulsar_asyncio() -> None:
    import pulsar.asyncio as official_aio

    from magnetar.client import asyncio as ours_aio

    theirs = _params(official_aio.Client.create_producer)
    mine = _params(ours_aio.Client.create_producer)
    assert mine["batching_enabled"] is theirs["batching_enabled"] is True
    # The async core's default configuration batches too.
    assert aio.ProducerConfiguration().batching_enabled is True


def test_message_id_accessors_and_serialization() -> None:
    msg_id = ours.MessageId(partition=2, ledger_id=10, entry_id=20, batch_index=3)
    assert (msg_id.partition(), msg_id.ledger_id(), msg_id.entry_id(), msg_id.batch_index()) == (
        2, 10, 20, 3,
    )  # fmt: skip
    official = pulsar.MessageId(2, 10, 20, 3)
    assert msg_id.serialize() == official.serialize()
    assert ours.MessageId.deserialize(official.serialize()) == msg_id
    assert ours.MessageId.earliest < msg_id < ours.MessageId.latest
