"""Subscriptions and dispatchers over real storage (no sockets): permits,
redelivery and acks, observed through a recording connection."""

from __future__ import annotations

import asyncio

import pytest

from magnetar.broker.dispatchers.consumer import Consumer, SubType
from magnetar.broker.errors import BrokerServiceError
from magnetar.broker.storage.api import InitialPosition, Position
from magnetar.broker.topics.base import SubscribeOptions
from magnetar.broker.topics.persistent import PersistentTopic
from magnetar.broker.topics.persistent_subscription import PersistentSubscription
from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.frames import Payload
from tests.unit.broker.recording import RecordingConnection

Recorder = RecordingConnection


async def _publish(topic: PersistentTopic, count: int) -> list[Position]:
    data = Payload.build(pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1), b"x")
    return [await topic.append(data.data, 1) for _ in range(count)]


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)
    await asyncio.sleep(0.02)


async def _subscribe(
    topic: PersistentTopic, cnx: Recorder, cid: int, sub_type: int, sub: str = "s"
) -> tuple[Consumer, PersistentSubscription]:
    consumer, _ = await topic.subscribe(
        cnx,
        SubscribeOptions(
            consumer_id=cid,
            subscription=sub,
            sub_type=sub_type,
            consumer_name=f"c{cid}",
            initial_position=InitialPosition.EARLIEST,
        ),
    )
    # The concrete subscription, to look at its cursor.
    return consumer, topic.subscriptions[sub]


async def test_no_read_without_permits(topic: PersistentTopic) -> None:
    """SEM-2.5: the cursor is not read while no consumer has permits."""
    cnx = Recorder()
    consumer, sub = await _subscribe(topic, cnx, 1, SubType.Exclusive)
    positions = await _publish(topic, 5)
    await _settle()
    cursor = sub.cursor
    assert cursor.read_position == positions[0]
    assert cnx.messages() == []
    sub.consumer_flow(consumer, 2)
    await _settle()
    assert [m[1] for m in cnx.messages()] == [0, 1]
    assert consumer.permits == 0


async def test_shared_leaver_hands_pending_to_others(topic: PersistentTopic) -> None:
    """SEM-3.8: pending messages of a leaving consumer go to the others, count 1."""
    a_cnx, b_cnx = Recorder(), Recorder()
    a, sub = await _subscribe(topic, a_cnx, 1, SubType.Shared)
    positions = await _publish(topic, 4)
    sub.consumer_flow(a, 10)
    await _settle()
    assert [m[1] for m in a_cnx.messages()] == [0, 1, 2, 3]
    sub.acknowledge_individual(a, [positions[1]], [None])
    b, _ = await _subscribe(topic, b_cnx, 2, SubType.Shared)
    sub.consumer_flow(b, 10)
    sub.remove_consumer(a)
    await _settle()
    assert b_cnx.messages() == [(2, 0, 1), (2, 2, 1), (2, 3, 1)]
    assert list(b.pending_acks) == [positions[0], positions[2], positions[3]]


async def test_exclusive_redeliver_all_rewinds(topic: PersistentTopic) -> None:
    """SEM-3.7: REDELIVER without ids on Exclusive rewinds to the first unacked."""
    cnx = Recorder()
    consumer, sub = await _subscribe(topic, cnx, 1, SubType.Exclusive)
    positions = await _publish(topic, 3)
    sub.consumer_flow(consumer, 3)
    await _settle()
    sub.acknowledge_cumulative(consumer, positions[0])
    consumer.flow(3)
    sub.redeliver(consumer, None)
    await _settle()
    assert cnx.messages()[3:] == [(1, 1, 1), (1, 2, 1)]


async def test_cumulative_ack_refused_on_shared(topic: PersistentTopic) -> None:
    """SEM-3.2: cumulative ack on Shared is refused with a clear error."""
    consumer, sub = await _subscribe(topic, Recorder(), 1, SubType.Shared)
    positions = await _publish(topic, 1)
    with pytest.raises(BrokerServiceError, match="cumulative ack is not allowed on Shared"):
        sub.acknowledge_cumulative(consumer, positions[0])


async def test_exclusive_second_consumer_refused(topic: PersistentTopic) -> None:
    """SEM-4.1: ConsumerBusy for a second consumer."""
    await _subscribe(topic, Recorder(), 1, SubType.Exclusive)
    with pytest.raises(BrokerServiceError) as info:
        await _subscribe(topic, Recorder(), 2, SubType.Exclusive)
    assert info.value.code.name == "ConsumerBusy"


async def test_type_change_redelivers_unacked(topic: PersistentTopic) -> None:
    """When every consumer left, a consumer of another type may take the
    subscription; it gets every unacked message (SEM-3.8)."""
    first_cnx, second_cnx = Recorder(), Recorder()
    first, sub = await _subscribe(topic, first_cnx, 1, SubType.Exclusive)
    positions = await _publish(topic, 3)
    sub.consumer_flow(first, 10)
    await _settle()
    sub.acknowledge_individual(first, [positions[1]], [None])
    sub.remove_consumer(first)
    second, _ = await _subscribe(topic, second_cnx, 2, SubType.Shared)
    sub.consumer_flow(second, 10)
    await _settle()
    assert [m[1] for m in second_cnx.messages()] == [0, 2]
