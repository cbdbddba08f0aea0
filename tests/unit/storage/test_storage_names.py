"""Issue 19: every topic, subscription, producer and consumer name is either
refused with a naming error or accepted and usable by real storage; never an
internal error (no OSError from a file name, no ValueError from a path)."""

from __future__ import annotations

import asyncio
import re
import tempfile
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from magnetar.broker.storage import FileManagedLedgerFactory
from magnetar.broker.storage.api import ManagedLedgerConfig, SyncPolicy
from magnetar.broker.storage.paths import ML_ROOT, ledger_meta_path
from magnetar.broker.topics.persistent import ledger_name
from magnetar.proto.naming import (
    InvalidName,
    InvalidTopicName,
    TopicName,
    validate_consumer_name,
    validate_producer_name,
    validate_subscription_name,
)

TRICKY = st.sampled_from(
    ["", " ", ".", "..", "../..", "a/b", "/", "\\", "\x00", "é" * 200, "y" * 300, "%2F", "~"]
)
NAMES = st.one_of(
    TRICKY,
    st.text(min_size=0, max_size=40),
    st.text(alphabet="./\\%-_:=é中 a", min_size=1, max_size=300),
)


def _usable(topic: TopicName, subscription: str) -> None:
    """Store an entry under the topic, and a cursor under the subscription."""

    async def go() -> None:
        with tempfile.TemporaryDirectory() as data:
            factory = await FileManagedLedgerFactory.create(
                data, ManagedLedgerConfig(sync_policy=SyncPolicy.NONE)
            )
            try:
                ledger = await factory.open(ledger_name(topic))
                position = await ledger.add_entry(b"payload")
                cursor = await ledger.open_cursor(subscription)
                cursor.mark_delete(position, properties={subscription: 1})
                assert [e.data for e in await ledger.read_positions([position])] == [b"payload"]
                await ledger.close()
                reopened = await factory.open(ledger_name(topic))
                assert reopened.get_cursor(subscription) is not None
                # Listed by its name, whatever characters it has (the broker
                # finds unloaded topics this way).
                namespace = f"{topic.tenant}/{topic.namespace}/"
                assert await factory.names(namespace) == [ledger_name(topic)]
            finally:
                await factory.close()

    asyncio.run(go())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(local=NAMES, subscription=NAMES)
# Percent-encoding makes these longer than any file name may be.
@example(local="é" * 255, subscription="é" * 1024)
@example(local="y" * 255, subscription="..")
def test_topic_and_subscription_names(local: str, subscription: str) -> None:
    try:
        topic = TopicName.parse(f"persistent://public/default/{local}")
    except InvalidTopicName:
        topic = None
    try:
        validate_subscription_name(subscription)
    except InvalidName:
        subscription = "fallback"
    if topic is not None:
        _usable(topic, subscription)


@given(name=NAMES)
def test_producer_and_consumer_names(name: str) -> None:
    for validate in (validate_producer_name, validate_consumer_name):
        try:
            validate(name)
        except InvalidName as exc:
            assert str(exc)


@given(name=NAMES)
@example(name="public/default/persistent/t-1")
@example(name="a~b.c_d-e")
def test_storage_names_are_percent_encoded_as_quote_does(name: str) -> None:
    # paths.py skips quote()'s walk byte by byte for plain names.
    assert ledger_meta_path(name) == f"{ML_ROOT}/{quote(name, safe='')}"


@given(local=NAMES)
@example(local="orders-partition-3")
@example(local="x-partition-")
def test_parsed_names_are_remembered_and_refusals_repeated(local: str) -> None:
    full = f"persistent://public/default/{local}"
    try:
        first = TopicName.parse(full)
    except InvalidTopicName:
        with pytest.raises(InvalidTopicName):
            TopicName.parse(full)
        return
    assert TopicName.parse(full) is first
    match = re.match(r"^(.+)-partition-(\d+)$", local)
    assert first.partition_index == (int(match.group(2)) if match else -1)
