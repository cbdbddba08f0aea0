"""The periodic stats update (issue 13): plain counters on topics,
subscriptions and consumers become per-second rates over the interval an
injected clock says has passed; nothing waits for real time."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from magnetar.broker.counters import RateCounter
from magnetar.broker.dispatchers.consumer import SubType
from magnetar.broker.observability.stats_update import StatsUpdater
from magnetar.broker.storage import FileManagedLedgerFactory
from magnetar.broker.storage.api import InitialPosition, ManagedLedgerConfig, SyncPolicy
from magnetar.broker.topics.base import SubscribeOptions
from magnetar.broker.topics.non_persistent import NonPersistentTopic
from magnetar.broker.topics.persistent import PersistentTopic
from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.frames import Payload
from magnetar.proto.naming import TopicName
from tests.support.polling import eventually_async
from tests.unit.broker.recording import RecordingConnection


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _options(consumer_id: int, sub_type: int = SubType.Exclusive) -> SubscribeOptions:
    return SubscribeOptions(
        consumer_id=consumer_id,
        subscription="s",
        sub_type=sub_type,
        consumer_name=f"c{consumer_id}",
        initial_position=InitialPosition.EARLIEST,
    )


def _entry(payload: bytes = b"x" * 10) -> bytes:
    meta = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    return Payload.build(meta, payload).data


def test_rate_counter_divides_what_was_counted_in_the_interval() -> None:
    counter = RateCounter()
    counter.add(30, 3000)
    counter.update(10.0)
    assert (counter.msg_rate, counter.byte_rate) == (3.0, 300.0)
    counter.add(5, 50)
    counter.update(5.0)
    assert (counter.msg_rate, counter.byte_rate) == (1.0, 10.0)
    assert (counter.messages, counter.bytes) == (35, 3050)
    counter.update(0.0)  # a zero interval keeps the last rates
    assert counter.msg_rate == 1.0
    counter.update(2.0)
    assert (counter.msg_rate, counter.byte_rate) == (0.0, 0.0)


async def test_topic_subscription_and_consumer_rates_over_the_clock() -> None:
    clock = Clock()
    topic = NonPersistentTopic(TopicName.parse("non-persistent://public/default/rates"))
    updater = StatsUpdater(lambda: [topic], 5.0, clock)
    cnx = RecordingConnection()
    consumer, sub = await topic.subscribe(cnx, _options(1))
    consumer.flow(1000)
    data = _entry()
    for _ in range(50):
        await topic.append(data, 2)  # a batch of 2 messages each
    clock.now += 5.0
    updater.update()
    assert topic.published.msg_rate == 20.0
    assert topic.published.byte_rate == 50 * len(data) / 5.0
    assert topic.dispatched.msg_rate == 20.0
    assert sub.dispatched.msg_rate == 20.0
    assert sub.dispatched.byte_rate == topic.published.byte_rate
    assert consumer.dispatched.msg_rate == 20.0
    # Nothing in the next interval: the rates fall to zero, the totals stay.
    clock.now += 10.0
    updater.update()
    assert (topic.published.msg_rate, sub.dispatched.msg_rate) == (0.0, 0.0)
    assert (topic.published.messages, consumer.dispatched.messages) == (100, 100)
    await topic.close(notify_clients=False)


async def test_the_update_task_has_one_owner_that_stops_it() -> None:
    """The background task runs the update on its interval; stop() cancels
    and awaits it, and may be called twice."""
    topic = NonPersistentTopic(TopicName.parse("non-persistent://public/default/task"))
    updater = StatsUpdater(lambda: [topic], 0.01)
    updater.start()
    await topic.append(_entry(), 1)
    for _ in range(200):
        if topic.published.msg_rate > 0:
            break
        await asyncio.sleep(0.01)
    assert topic.published.msg_rate > 0
    await updater.stop()
    await updater.stop()
    await topic.close(notify_clients=False)


@pytest.fixture
async def persistent(tmp_path: Path) -> AsyncIterator[PersistentTopic]:
    factory = await FileManagedLedgerFactory.create(
        str(tmp_path), ManagedLedgerConfig(sync_policy=SyncPolicy.NONE)
    )
    ledger = await factory.open("public/default/persistent/r")
    topic = PersistentTopic(TopicName.parse("persistent://public/default/r"), ledger)
    try:
        yield topic
    finally:
        await topic.close(notify_clients=False)
        await factory.close()


async def test_redelivered_messages_make_the_redeliver_rate(persistent: PersistentTopic) -> None:
    """SEM-3.7: entries handed back are dispatched again; they count in
    msgRateRedeliver and in msgRateOut a second time."""
    clock = Clock()
    updater = StatsUpdater(lambda: [persistent], 1.0, clock)
    cnx = RecordingConnection()
    consumer, sub = await persistent.subscribe(cnx, _options(1, SubType.Shared))
    for _ in range(4):
        await persistent.append(_entry(), 1)
    sub.consumer_flow(consumer, 100)
    await eventually_async("first delivery", lambda: len(cnx.messages()) == 4, timeout=5)
    sub.redeliver(consumer, None)
    await eventually_async("redelivery", lambda: len(cnx.messages()) == 8, timeout=5)
    clock.now += 2.0
    updater.update()
    assert sub.redelivered.msg_rate == 2.0  # 4 messages again over 2 s
    assert sub.dispatched.msg_rate == 4.0
    assert persistent.published.msg_rate == 2.0
    # Storage's own counter of entries written, followed by the update.
    assert persistent.storage_writes.msg_rate == 2.0
