"""The blocking facade's consumer with the official client's keywords, and priority levels."""

from __future__ import annotations

import asyncio
import threading

import pulsar
import pytest

from magnetar import client as magnetar
from magnetar.client.aio import (
    Client,
    ConsumerConfiguration,
    ConsumerType,
    InitialPosition,
    OutgoingMessage,
    ProducerConfiguration,
)
from magnetar.client.aio.consumer.consumer import Consumer
from tests.interop.conftest import BrokerUnderTest

pytestmark = pytest.mark.lite


def test_every_official_subscribe_keyword_is_accepted(
    ours: magnetar.Client, broker: BrokerUnderTest
) -> None:
    """SEM-1: every keyword of `pulsar.Client.subscribe`, set off its default, official
    policy objects included, subscribes and consumes (no option refused)."""
    topic = broker.topic("keywords")
    producer = ours.create_producer(topic)
    consumer = ours.subscribe(
        topic,
        "sub",
        consumer_type=magnetar.ConsumerType.Shared,
        schema=None,
        message_listener=None,
        receiver_queue_size=10,
        max_total_receiver_queue_size_across_partitions=100,
        consumer_name="all-keywords",
        unacked_messages_timeout_ms=10000,
        broker_consumer_stats_cache_time_ms=1000,
        negative_ack_redelivery_delay_ms=1000,
        is_read_compacted=False,
        properties={"app": "test"},
        pattern_auto_discovery_period=5,
        initial_position=magnetar.InitialPosition.Earliest,
        crypto_key_reader=magnetar.CryptoKeyReader("unused.pub", "unused.key"),
        replicate_subscription_state_enabled=True,
        max_pending_chunked_message=3,
        auto_ack_oldest_chunked_message_on_queue_full=True,
        start_message_id_inclusive=True,
        batch_receive_policy=pulsar.ConsumerBatchReceivePolicy(2, 1024, 500),
        key_shared_policy=pulsar.ConsumerKeySharedPolicy(),
        batch_index_ack_enabled=True,
        regex_subscription_mode=pulsar.RegexSubscriptionMode.AllTopics,
        dead_letter_policy=pulsar.ConsumerDeadLetterPolicy(5),
        crypto_failure_action=pulsar.ConsumerCryptoFailureAction.CONSUME,
    )
    for i in range(3):
        producer.send(b"k%d" % i)
    got = consumer.batch_receive()
    assert [m.data() for m in got] == [b"k0", b"k1"]
    for msg in got:
        consumer.acknowledge(msg)
    msg = consumer.receive(5000)
    consumer.negative_acknowledge(msg)
    assert consumer.receive(5000).data() == b"k2"
    consumer.close()


def test_listener_runs_on_its_own_thread_and_may_block(
    ours: magnetar.Client, broker: BrokerUnderTest
) -> None:
    """The facade's listener runs off the loop thread: blocking calls inside it work."""
    topic = broker.topic("flistener")
    done = threading.Event()
    seen: list[bytes] = []

    def listener(consumer: magnetar.Consumer, msg: magnetar.Message) -> None:
        seen.append(msg.data())
        consumer.acknowledge(msg)
        if len(seen) == 3:
            done.set()

    ours.subscribe(
        topic,
        "sub",
        message_listener=listener,
        initial_position=magnetar.InitialPosition.Earliest,
        ack_receipt_enabled=True,
    )
    producer = ours.create_producer(topic)
    for i in range(3):
        producer.send(b"l%d" % i)
    assert done.wait(10)
    assert seen == [b"l0", b"l1", b"l2"]


async def test_shared_priority_dispatch_order(broker: BrokerUnderTest) -> None:
    """SEM-4.3: C1 (0, 2 permits), C2 (0, 1), C3 (0, 1), C4 (1, 2), C5 (1, 1) receive in the
    order C1 C2 C3 C1 C4 C5 C4, through our client's priority_level."""
    broker.require("priority")
    topic = broker.topic("priority")
    async with Client(broker.url, operation_timeout_seconds=10) as client:
        plan = [("C1", 0, 2), ("C2", 0, 1), ("C3", 0, 1), ("C4", 1, 2), ("C5", 1, 1)]
        consumers = {
            name: await client.subscribe(
                topic,
                "prio",
                ConsumerConfiguration(
                    consumer_type=ConsumerType.Shared,
                    consumer_name=name,
                    receiver_queue_size=permits,
                    priority_level=level,
                ),
            )
            for name, level, permits in plan
        }
        producer = await client.create_producer(
            topic, ProducerConfiguration(batching_enabled=False)
        )
        for i in range(7):
            await producer.send(OutgoingMessage(b"%d" % i))
        # Every entry dispatched before any receive frees a permit.
        async with asyncio.timeout(10):
            while sum(len(c.queue) for c in consumers.values()) < 7:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        owner: dict[int, str] = {}
        for name, consumer in consumers.items():
            for _ in range(dict((n, p) for n, _, p in plan)[name]):
                owner[int((await consumer.receive(5000)).data())] = name
        assert [owner.get(i) for i in range(7)] == ["C1", "C2", "C3", "C1", "C4", "C5", "C4"], owner


async def test_failover_priority_and_active_listener(broker: BrokerUnderTest) -> None:
    """SEM-4.2: C1 (priority 1, "aaa") and C2 (priority 0, "bbb") -> C2 active on a
    partition, and the active-consumer listener says so."""
    broker.require("priority")
    url, partitioned = broker.partitioned_topic("failover")
    topic = f"{partitioned}-partition-0"
    changes: dict[str, list[bool]] = {"aaa": [], "bbb": []}
    async with Client(url, operation_timeout_seconds=10) as client:

        def failover(name: str, priority: int) -> ConsumerConfiguration:
            return ConsumerConfiguration(
                consumer_type=ConsumerType.Failover,
                consumer_name=name,
                priority_level=priority,
                initial_position=InitialPosition.Earliest,
                active_consumer_listener=lambda c, active: changes[name].append(active),
            )

        c1 = await client.subscribe(topic, "fo", failover("aaa", 1))
        c2 = await client.subscribe(topic, "fo", failover("bbb", 0))
        producer = await client.create_producer(
            topic, ProducerConfiguration(batching_enabled=False)
        )
        await producer.send(OutgoingMessage(b"x"))
        assert (await c2.receive(5000)).data() == b"x"
        assert isinstance(c1, Consumer) and isinstance(c2, Consumer)  # one topic each
        assert c2.is_active is True and changes["bbb"][-1] is True
        assert c1.is_active is False


def test_batch_receive_bytes_limit_bulk_acks_and_closed_client(
    ours: magnetar.Client, broker: BrokerUnderTest
) -> None:
    """SEM-1 batch_receive_policy / SEM-3.4: a byte limit cuts a batch after the
    message that reaches it and the rest comes next, in order; acks handed to the
    loop in bulk all reach the broker (nothing is redelivered to the next consumer);
    a closed client refuses receive and acknowledge."""
    topic = broker.topic("fbulk")
    producer = ours.create_producer(topic, batching_enabled=True, batching_max_messages=20)
    for i in range(20):
        producer.send_async(b"%02d-" % i + b"x" * 7, None)  # 10 bytes each
    producer.flush()
    consumer = ours.subscribe(
        topic,
        "sub",
        consumer_type=magnetar.ConsumerType.Shared,
        initial_position=magnetar.InitialPosition.Earliest,
        batch_receive_policy=magnetar.ConsumerBatchReceivePolicy(-1, 45, 2000),
    )
    got: list[magnetar.Message] = []
    while len(got) < 20:
        batch = consumer.batch_receive()
        assert 0 < len(batch) <= 5 and sum(len(m.data()) for m in batch[:-1]) < 45
        got += batch
    assert [m.data()[:2] for m in got] == [b"%02d" % i for i in range(20)]
    for msg in got:
        consumer.acknowledge(msg)
    consumer.close()  # flushes the grouped acks
    again = ours.subscribe(topic, "sub", consumer_type=magnetar.ConsumerType.Shared)
    with pytest.raises(magnetar.Timeout):
        again.receive(300)
    ours.close()
    with pytest.raises(magnetar.AlreadyClosed):
        again.receive(10)
    with pytest.raises(magnetar.AlreadyClosed):
        again.acknowledge(got[0])


def test_reconsume_later_comes_back_through_the_blocking_receive(
    ours: magnetar.Client, broker: BrokerUnderTest
) -> None:
    """SEM-6.2 through the facade: the retry topic's messages reach the blocking
    consumer's receive, with RECONSUMETIMES counted, and are acked from there."""
    broker.require("delayed_delivery")
    topic = broker.topic("fretry")
    consumer = ours.subscribe(
        topic,
        "sub",
        consumer_type=magnetar.ConsumerType.Shared,
        enable_retry=True,
        dead_letter_policy=magnetar.ConsumerDeadLetterPolicy(3),
    )
    ours.create_producer(topic).send(b"again")
    msg = consumer.receive(5000)
    consumer.reconsume_later(msg, 100)
    retried = consumer.receive(10000)
    assert retried.data() == b"again" and retried.properties()["RECONSUMETIMES"] == "1"
    assert retried.topic_name() == f"{topic}-sub-RETRY"
    consumer.acknowledge(retried)
    with pytest.raises(magnetar.Timeout):
        consumer.receive(300)
