"""maxUnackedMessagesPerConsumer / PerSubscription in the dispatchers, over
real storage (no sockets): a consumer or a subscription at its limit gets
nothing more until acks bring it to half (Pulsar's rule), Shared and
Key_Shared only."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from magnetar.broker.dispatchers.consumer import Consumer, SubType
from magnetar.broker.policies.resolver import PolicyDefaults, TopicPolicies
from magnetar.broker.storage.api import InitialPosition, Position
from magnetar.broker.topics.base import SubscribeOptions
from magnetar.broker.topics.persistent import PersistentTopic
from magnetar.broker.topics.persistent_subscription import PersistentSubscription
from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.frames import Payload
from magnetar.proto.naming import TopicName
from tests.unit.broker.recording import RecordingConnection


async def _publish(topic: PersistentTopic, count: int, key: str = "") -> list[Position]:
    meta = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    if key:
        meta.partition_key = key
    data = Payload.build(meta, b"x")
    return [await topic.append(data.data, 1) for _ in range(count)]


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)
    await asyncio.sleep(0.02)


async def _subscribe(
    topic: PersistentTopic, cid: int, sub_type: int = SubType.Shared, permits: int = 100
) -> tuple[Consumer, PersistentSubscription, RecordingConnection]:
    cnx = RecordingConnection()
    consumer, _ = await topic.subscribe(
        cnx,
        SubscribeOptions(
            consumer_id=cid,
            subscription="s",
            sub_type=sub_type,
            consumer_name=f"c{cid}",
            initial_position=InitialPosition.EARLIEST,
        ),
    )
    sub = topic.subscriptions["s"]
    sub.consumer_flow(consumer, permits)
    return consumer, sub, cnx


def _ack(sub: PersistentSubscription, consumer: Consumer, count: int) -> None:
    positions = list(consumer.pending_acks)[:count]
    sub.acknowledge_individual(consumer, positions, [None] * len(positions))


async def test_shared_consumer_blocked_at_its_limit_until_half(topic: PersistentTopic) -> None:
    topic.set_unacked_limits(5, 0)
    slow, sub, slow_cnx = await _subscribe(topic, 1)
    fast, _, fast_cnx = await _subscribe(topic, 2)
    await _publish(topic, 20)
    await _settle()
    assert len(slow_cnx.messages()) == 5
    assert slow.blocked and slow.unacked == 5
    assert len(fast_cnx.messages()) == 5  # at its limit too: nobody acks
    _ack(sub, fast, 5)
    await _settle()
    assert len(fast_cnx.messages()) == 10
    _ack(sub, slow, 2)  # 3 unacked: above half of 5, still blocked
    await _settle()
    assert slow.blocked and len(slow_cnx.messages()) == 5
    _ack(sub, slow, 1)  # 2 unacked: half (rounded down), resumes
    await _settle()
    assert len(slow_cnx.messages()) == 8
    assert slow.unacked == 5 and slow.blocked


async def test_subscription_blocked_at_its_limit_until_below_half(
    topic: PersistentTopic,
) -> None:
    topic.set_unacked_limits(0, 6)
    consumer, sub, cnx = await _subscribe(topic, 1)
    await _publish(topic, 20)
    await _settle()
    assert len(cnx.messages()) == 6
    assert sub.blocked_on_unacked and not consumer.blocked
    _ack(sub, consumer, 3)  # 3 left: not below half of 6
    await _settle()
    assert len(cnx.messages()) == 6
    _ack(sub, consumer, 1)  # 2 left: below half, dispatch resumes up to the limit
    await _settle()
    assert len(cnx.messages()) == 10
    assert sub.blocked_on_unacked


async def test_a_leaving_consumer_lowers_the_subscription_count(
    topic: PersistentTopic,
) -> None:
    topic.set_unacked_limits(0, 4)
    first, sub, first_cnx = await _subscribe(topic, 1)
    await _publish(topic, 10)
    await _settle()
    assert len(first_cnx.messages()) == 4 and sub.blocked_on_unacked
    second, _, second_cnx = await _subscribe(topic, 2)
    await _settle()
    assert second_cnx.messages() == []
    sub.remove_consumer(first)  # its 4 go back: the subscription resumes
    await _settle()
    assert len(second_cnx.messages()) == 4 and second.unacked == 4


async def test_key_shared_consumer_limit(topic: PersistentTopic) -> None:
    topic.set_unacked_limits(3, 0)
    consumer, sub, cnx = await _subscribe(topic, 1, SubType.Key_Shared)
    await _publish(topic, 10, key="k")
    await _settle()
    assert len(cnx.messages()) == 3 and consumer.blocked
    _ack(sub, consumer, 2)
    await _settle()
    assert len(cnx.messages()) == 5


async def test_limit_changes_apply_at_once(topic: PersistentTopic) -> None:
    topic.set_unacked_limits(2, 0)
    consumer, _, cnx = await _subscribe(topic, 1)
    await _publish(topic, 10)
    await _settle()
    assert len(cnx.messages()) == 2
    topic.set_unacked_limits(0, 0)
    await _settle()
    assert len(cnx.messages()) == 10 and not consumer.blocked


async def test_exclusive_is_not_limited(topic: PersistentTopic) -> None:
    """Pulsar counts unacked messages against the limits for Shared and
    Key_Shared only."""
    topic.set_unacked_limits(2, 3)
    consumer, _, cnx = await _subscribe(topic, 1, SubType.Exclusive)
    await _publish(topic, 10)
    await _settle()
    assert len(cnx.messages()) == 10 and consumer.unacked == 10 and not consumer.blocked


async def test_redelivery_request_unblocks(topic: PersistentTopic) -> None:
    topic.set_unacked_limits(4, 0)
    consumer, sub, cnx = await _subscribe(topic, 1)
    await _publish(topic, 6)
    await _settle()
    assert len(cnx.messages()) == 4 and consumer.blocked
    sub.redeliver(consumer, None)  # all 4 handed back: unacked 0
    await _settle()
    # Unblocked, it gets the 4 again (blocked anew at its limit).
    assert len(cnx.messages()) == 8
    assert consumer.blocked and consumer.unacked == 4


def test_resolver_topic_over_namespace_over_broker() -> None:
    defaults = PolicyDefaults(max_unacked_on_consumer=50_000, max_unacked_on_subscription=200_000)
    name = TopicName.parse("t")

    def limits(topic: Mapping[str, object], namespace: Mapping[str, object]) -> tuple[int, int]:
        return TopicPolicies(name, topic, namespace, defaults).unacked_limits

    assert limits({}, {}) == (50_000, 200_000)
    namespace = {
        "max_unacked_messages_per_consumer": 100,
        "max_unacked_messages_per_subscription": 0,
    }
    assert limits({}, namespace) == (100, 0)
    topic = {"maxUnackedMessagesOnConsumer": 5, "maxUnackedMessagesOnSubscription": 8}
    assert limits(topic, namespace) == (5, 8)
