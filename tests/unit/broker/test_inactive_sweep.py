"""Deleting inactive topics and subscriptions (service/inactivity.py): the
decisions, on a fake clock, over real topics and storage (no sockets)."""

from __future__ import annotations

from dataclasses import dataclass, field

from magnetar.broker.dispatchers.consumer import Consumer, SubType
from magnetar.broker.policies import catalog
from magnetar.broker.policies.inactive import (
    NO_SUBSCRIPTIONS,
    SUBSCRIPTIONS_CAUGHT_UP,
    InactiveTopicPolicy,
)
from magnetar.broker.policies.resolver import PolicyDefaults, TopicPolicies
from magnetar.broker.service.inactivity import IdleTimes, InactivitySweep
from magnetar.broker.storage.api import InitialPosition
from magnetar.broker.topics.base import SubscribeOptions
from magnetar.broker.topics.non_persistent import NonPersistentTopic
from magnetar.broker.topics.persistent import PersistentTopic
from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.frames import Payload
from magnetar.proto.naming import TopicName
from tests.unit.broker.recording import RecordingConnection


@dataclass
class Policies:
    inactive_topic_policy: InactiveTopicPolicy = field(default_factory=InactiveTopicPolicy)
    subscription_expiration_minutes: int = 0


@dataclass
class Sweep:
    """An InactivitySweep whose policies the test sets, recording deletions."""

    policies: Policies = field(default_factory=Policies)
    deleted: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.sweep = InactivitySweep(self._resolve, self._delete)

    async def _resolve(self, name: TopicName) -> Policies:
        return self.policies

    async def _delete(self, name: str) -> None:
        self.deleted.append(name)


def _deleting(mode: str = NO_SUBSCRIPTIONS, seconds: int = 10) -> Policies:
    return Policies(InactiveTopicPolicy(mode, seconds, True))


async def _consumer(topic: PersistentTopic | NonPersistentTopic, sub: str) -> Consumer:
    consumer, _ = await topic.subscribe(
        RecordingConnection(),
        SubscribeOptions(
            consumer_id=1,
            subscription=sub,
            sub_type=SubType.Exclusive,
            consumer_name="c",
            initial_position=InitialPosition.EARLIEST,
        ),
    )
    return consumer


async def _close(topic: PersistentTopic | NonPersistentTopic, sub: str, consumer: Consumer) -> None:
    topic.subscriptions[sub].remove_consumer(consumer)


async def _publish(topic: PersistentTopic, count: int) -> None:
    data = Payload.build(pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1), b"x")
    for _ in range(count):
        await topic.append(data.data, 1)


def test_idle_times_restart_on_a_new_signature() -> None:
    times = IdleTimes()
    assert times.idle_for("t", 0, 100.0) == 0.0
    assert times.idle_for("t", 0, 130.0) == 30.0
    assert times.idle_for("t", 1, 140.0) == 0.0  # active in between
    assert times.idle_for("t", 1, 150.0) == 10.0
    times.keep_only(set())
    assert len(times) == 0
    assert times.idle_for("t", 1, 160.0) == 0.0


async def test_topic_deleted_after_max_inactive_duration(topic: PersistentTopic) -> None:
    run = Sweep(_deleting(seconds=10))
    for now in (0.0, 5.0, 9.9):
        await run.sweep.check([topic], now)
    assert run.deleted == []
    await run.sweep.check([topic], 10.0)
    assert run.deleted == [topic.name]


async def test_nothing_deleted_unless_delete_while_inactive(topic: PersistentTopic) -> None:
    run = Sweep(Policies(InactiveTopicPolicy(NO_SUBSCRIPTIONS, 0, False)))
    for now in (0.0, 100.0, 10_000.0):
        await run.sweep.check([topic], now)
    assert run.deleted == []
    assert len(run.sweep.idle_topics) == 0


async def test_a_producer_between_sweeps_restarts_the_idle_time(topic: PersistentTopic) -> None:
    run = Sweep(_deleting(seconds=10))
    await run.sweep.check([topic], 0.0)
    producer = topic.add_producer(
        RecordingConnection(), 1, "p", access_mode=0, user_provided_name=True
    )
    await run.sweep.check([topic], 5.0)  # a producer: active
    topic.remove_producer(producer)
    await run.sweep.check([topic], 6.0)
    await run.sweep.check([topic], 15.0)
    assert run.deleted == []
    await run.sweep.check([topic], 16.0)
    assert run.deleted == [topic.name]


async def test_producer_that_came_and_left_unseen_still_counts(topic: PersistentTopic) -> None:
    run = Sweep(_deleting(seconds=10))
    await run.sweep.check([topic], 0.0)
    topic.remove_producer(
        topic.add_producer(RecordingConnection(), 1, "p", access_mode=0, user_provided_name=True)
    )
    await run.sweep.check([topic], 10.0)
    assert run.deleted == []
    await run.sweep.check([topic], 20.0)
    assert run.deleted == [topic.name]


async def test_subscriptions_keep_a_topic_by_mode(topic: PersistentTopic) -> None:
    """delete_when_no_subscriptions: a durable subscription keeps the topic;
    delete_when_subscriptions_caught_up: only while it has a backlog."""
    consumer = await _consumer(topic, "s")
    await _close(topic, "s", consumer)
    await _publish(topic, 3)
    run = Sweep(_deleting(NO_SUBSCRIPTIONS, seconds=1))
    for now in (0.0, 10.0):
        await run.sweep.check([topic], now)
    assert run.deleted == []
    run.policies = _deleting(SUBSCRIPTIONS_CAUGHT_UP, seconds=1)
    for now in (20.0, 30.0):
        await run.sweep.check([topic], now)
    assert run.deleted == []  # a backlog of 3
    (await topic.get_subscription("s")).clear_backlog()
    await run.sweep.check([topic], 40.0)
    await run.sweep.check([topic], 41.0)
    assert run.deleted == [topic.name]


async def test_a_consumer_keeps_the_topic(topic: PersistentTopic) -> None:
    await _consumer(topic, "s")
    run = Sweep(_deleting(SUBSCRIPTIONS_CAUGHT_UP, seconds=0))
    for now in (0.0, 100.0):
        await run.sweep.check([topic], now)
    assert run.deleted == []


async def test_non_persistent_topic_without_producers_or_consumers() -> None:
    topic = NonPersistentTopic(TopicName.parse("non-persistent://public/default/np"))
    run = Sweep(_deleting(seconds=10))
    consumer = await _consumer(topic, "s")
    await run.sweep.check([topic], 0.0)
    await run.sweep.check([topic], 50.0)
    assert run.deleted == []
    await _close(topic, "s", consumer)
    await run.sweep.check([topic], 51.0)
    await run.sweep.check([topic], 61.0)
    assert run.deleted == [topic.name]
    await topic.close(notify_clients=False)


async def test_idle_subscription_expires_and_active_one_stays(topic: PersistentTopic) -> None:
    idle = await _consumer(topic, "idle")
    await _close(topic, "idle", idle)
    await _consumer(topic, "active")
    run = Sweep(Policies(subscription_expiration_minutes=2))
    await run.sweep.check([topic], 0.0)
    await run.sweep.check([topic], 119.0)
    assert topic.subscription_names() == ["active", "idle"]
    await run.sweep.check([topic], 120.0)
    assert topic.subscription_names() == ["active"]
    await run.sweep.check([topic], 10_000.0)
    assert topic.subscription_names() == ["active"]
    assert run.deleted == []


async def test_a_consumer_between_sweeps_restarts_the_subscription(topic: PersistentTopic) -> None:
    await _close(topic, "s", await _consumer(topic, "s"))
    run = Sweep(Policies(subscription_expiration_minutes=1))
    await run.sweep.check([topic], 0.0)
    await _close(topic, "s", await _consumer(topic, "s"))
    await run.sweep.check([topic], 60.0)
    assert topic.subscription_names() == ["s"]
    await run.sweep.check([topic], 120.0)
    assert topic.subscription_names() == []


async def test_no_expiration_when_unset(topic: PersistentTopic) -> None:
    await _close(topic, "s", await _consumer(topic, "s"))
    run = Sweep()
    for now in (0.0, 1e9):
        await run.sweep.check([topic], now)
    assert topic.subscription_names() == ["s"]


def test_resolved_topic_over_namespace_over_broker() -> None:
    name = TopicName.parse("persistent://public/ns/t")
    ns_body = {"inactiveTopicDeleteMode": SUBSCRIPTIONS_CAUGHT_UP, "deleteWhileInactive": True}
    own = {"maxInactiveDurationSeconds": 5, "deleteWhileInactive": False}
    defaults = PolicyDefaults()
    broker = TopicPolicies(name, {}, {}, defaults)
    assert broker.inactive_topic_policy == InactiveTopicPolicy(NO_SUBSCRIPTIONS, 60, False)
    assert broker.applied(catalog.INACTIVE_TOPIC_POLICIES) == {
        "inactiveTopicDeleteMode": NO_SUBSCRIPTIONS,
        "maxInactiveDurationSeconds": 60,
        "deleteWhileInactive": False,
    }
    namespace = TopicPolicies(name, {}, {"inactive_topic_policies": ns_body}, defaults)
    assert namespace.inactive_topic_policy == InactiveTopicPolicy(SUBSCRIPTIONS_CAUGHT_UP, 0, True)
    topic = TopicPolicies(
        name,
        {"inactiveTopicPolicies": own},
        {"inactive_topic_policies": ns_body, "subscription_expiration_time_minutes": 7},
        defaults,
    )
    assert topic.inactive_topic_policy == InactiveTopicPolicy(NO_SUBSCRIPTIONS, 5, False)
    assert topic.subscription_expiration_minutes == 7
    assert broker.subscription_expiration_minutes == 0
