"""subscriptionDispatchRate: the effective rate of each subscription (its own,
else the topic's, else the namespace's), and a dispatcher under both its
topic's shared quota and its subscription's own: the smaller allowance wins
and both are charged."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from magnetar.broker.dispatchers.base import DispatcherSettings
from magnetar.broker.dispatchers.consumer import Consumer, SubType
from magnetar.broker.policies.rates import DispatchRate, DispatchRateLimiter, InvalidRate
from magnetar.broker.policies.resolver import PolicyDefaults, TopicPolicies
from magnetar.broker.policies.subscription_rates import (
    SubscriptionDispatchRates,
    subscription_overrides,
)
from magnetar.broker.storage import FileManagedLedgerFactory
from magnetar.broker.storage.api import (
    InitialPosition,
    ManagedLedger,
    ManagedLedgerConfig,
    SyncPolicy,
)
from magnetar.broker.topics.persistent_subscription import PersistentSubscription
from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.frames import Payload
from magnetar.proto.naming import TopicName
from tests.unit.broker.recording import RecordingConnection

TOPIC = TopicName.parse("persistent://public/default/rates")


def _rate(messages: int) -> dict[str, int]:
    return {"dispatchThrottlingRateInMsg": messages}


def _policies(topic: dict[str, object], namespace: dict[str, object]) -> TopicPolicies:
    return TopicPolicies(TOPIC, topic, namespace, PolicyDefaults())


def test_topic_over_namespace_and_a_subscription_over_both() -> None:
    rates = _policies(
        {
            "subscriptionDispatchRate": _rate(10),
            "subscriptionPolicies": {"slow": {"dispatchRate": _rate(2)}, "other": {}},
        },
        {"subscriptionDispatchRate": _rate(1000)},
    ).subscription_dispatch_rates
    assert rates.of("slow") == DispatchRate(messages=2)
    assert rates.of("fast") == rates.of("other") == DispatchRate(messages=10)
    namespace_only = _policies({}, {"subscriptionDispatchRate": _rate(1000)})
    assert namespace_only.subscription_dispatch_rates.of("any") == DispatchRate(messages=1000)
    assert _policies({}, {}).subscription_dispatch_rates.of("any") is None


def test_overrides_skip_what_is_not_a_rate() -> None:
    assert subscription_overrides(None) == {}
    assert subscription_overrides({"s": "fast", "t": {"other": 1}}) == {}
    with pytest.raises(InvalidRate):
        subscription_overrides({"s": {"dispatchRate": {"ratePeriodInSecond": 0}}})


# ------------------------------------------------------------- dispatch


@pytest.fixture
async def ledger(tmp_path: Path) -> AsyncIterator[ManagedLedger]:
    factory = await FileManagedLedgerFactory.create(
        str(tmp_path), ManagedLedgerConfig(sync_policy=SyncPolicy.NONE)
    )
    try:
        yield await factory.open("public/default/persistent/rates")
    finally:
        await factory.close()


async def _received(
    ledger: ManagedLedger, name: str, topic_rate: DispatchRateLimiter, own: DispatchRate | None
) -> tuple[PersistentSubscription, RecordingConnection]:
    """A Shared subscription over the ledger's 10 entries, under the topic's
    quota and its own rate, once its consumer got what they let through."""
    cursor = await ledger.open_cursor(name, InitialPosition.EARLIEST)
    settings = DispatcherSettings(name="rates/s", dispatch_rate=topic_rate)
    sub = PersistentSubscription("rates", name, ledger, cursor, settings)
    sub.set_dispatch_rate(own)
    cnx = RecordingConnection()
    consumer = Consumer(name, 1, "c", SubType.Shared, cnx)
    await sub.add_consumer(consumer)
    sub.consumer_flow(consumer, 100)
    for _ in range(20):
        await asyncio.sleep(0)
    await asyncio.sleep(0.05)  # well inside the one-second period
    return sub, cnx


async def _store(ledger: ManagedLedger, count: int) -> None:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    for _ in range(count):
        await ledger.add_entry(Payload.build(metadata, b"x").data, 1)


async def test_the_smaller_allowance_wins_and_both_are_charged(ledger: ManagedLedger) -> None:
    await _store(ledger, 10)
    shared = DispatchRateLimiter()
    shared.set_rate(DispatchRate(messages=5))
    # Its own 3 is the smaller: 3 go, charged to both quotas.
    sub, cnx = await _received(ledger, "s1", shared, DispatchRate(messages=3))
    assert len(cnx.messages()) == 3
    assert sub.dispatch_rate.allowance() == 0
    assert shared.allowance() == 2
    await sub.close()
    # The topic's 2 left is smaller than another subscription's own 10.
    other, cnx = await _received(ledger, "s2", shared, DispatchRate(messages=10))
    assert len(cnx.messages()) == 2
    assert other.dispatch_rate.allowance() == 8
    assert shared.allowance() == 0
    await other.close()


async def test_each_subscription_spends_its_own_quota(ledger: ManagedLedger) -> None:
    await _store(ledger, 10)
    unlimited = DispatchRateLimiter()
    first, cnx1 = await _received(ledger, "s1", unlimited, DispatchRate(messages=4))
    second, cnx2 = await _received(ledger, "s2", unlimited, DispatchRate(messages=4))
    unset, cnx3 = await _received(ledger, "s3", unlimited, None)
    assert (len(cnx1.messages()), len(cnx2.messages()), len(cnx3.messages())) == (4, 4, 10)
    # Removing the rate lets the rest go at the next round.
    first.set_dispatch_rate(None)
    first.on_new_entries()
    await asyncio.sleep(0.05)
    assert len(cnx1.messages()) == 10
    for sub in (first, second, unset):
        await sub.close()


def test_unset_rates_give_none() -> None:
    assert SubscriptionDispatchRates().of("s") is None
