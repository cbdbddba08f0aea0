"""Topics consumers (issue 12, SEMANTICS 1): a partitioned topic, a topic
list and a pattern consumed through one subscription, by the official client
and by ours, against pulsar-lite and our broker: every message once with its
topic, acks routed to the right partition (nothing comes back after a
reconnect), and a bare id that cannot name its topic refused."""

from __future__ import annotations

import re
from typing import Any

import pytest

import magnetar.client as magnetar_client
from tests.interop.conftest import BrokerUnderTest
from tests.support.draining import receive_count, topics_and_data


def test_partitioned_topic_consumer(broker: BrokerUnderTest, api: Any) -> None:
    url, topic = broker.partitioned_topic("multi")
    client = api.Client(url, operation_timeout_seconds=10)
    try:
        consumer = client.subscribe(topic, "all", consumer_type=api.ConsumerType.Shared)
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(40):
            producer.send(b"m%d" % i, partition_key=f"k{i}")
        got = topics_and_data(receive_count(consumer, 40, by_id=True))
        assert sorted(d for _, d in got) == sorted(b"m%d" % i for i in range(40))
        assert all(t.startswith(f"{topic}-partition-") for t, _ in got)
        assert len({t for t, _ in got}) > 1
        consumer.close()
        again = client.subscribe(topic, "all", consumer_type=api.ConsumerType.Shared)
        with pytest.raises(api.Timeout):
            again.receive(timeout_millis=500)  # every ack reached its partition
    finally:
        client.close()


def test_topic_list_consumer(broker: BrokerUnderTest, api: Any) -> None:
    topics = [broker.topic("list") for _ in range(3)]
    client = api.Client(broker.url, operation_timeout_seconds=10)
    try:
        consumer = client.subscribe(topics, "all", consumer_type=api.ConsumerType.Shared)
        for topic in topics:
            client.create_producer(topic).send(topic.encode())
        got = topics_and_data(receive_count(consumer, 3))
        assert sorted(got) == sorted((t, t.encode()) for t in topics)
        with pytest.raises(api.Timeout):
            consumer.receive(timeout_millis=300)
        consumer.close()
        again = client.subscribe(topics, "all", consumer_type=api.ConsumerType.Shared)
        with pytest.raises(api.Timeout):
            again.receive(timeout_millis=300)  # every ack reached its topic
    finally:
        client.close()


def test_pattern_consumer(broker: BrokerUnderTest, api: Any) -> None:
    """SEM-1 topics_pattern: a regex subscription over the namespace gets the
    matching topics (not the others), each message with its topic, and acks
    reach each topic (nothing again after a resubscription). Discovery of
    later topics is test_regex_consumer_and_discovery (ours)."""
    broker.require("topics_of_namespace")
    tag = broker.topic("rxs").rsplit("/", 1)[1]
    topics = [f"persistent://public/default/{tag}-{suffix}" for suffix in ("a", "b")]
    other = f"persistent://public/default/not-{tag}"
    pattern = re.compile(f"persistent://public/default/{tag}-.*")
    client = api.Client(broker.url, operation_timeout_seconds=10)
    try:
        for topic in [*topics, other]:
            client.create_producer(topic).send(topic.encode())
        options = {
            "consumer_type": api.ConsumerType.Shared,
            "initial_position": api.InitialPosition.Earliest,
        }
        consumer = client.subscribe(pattern, "rx", **options)
        assert sorted(topics_and_data(receive_count(consumer, 2))) == [
            (t, t.encode()) for t in topics
        ]
        with pytest.raises(api.Timeout):
            consumer.receive(timeout_millis=300)
        consumer.close()
        again = client.subscribe(pattern, "rx", **options)
        with pytest.raises(api.Timeout):
            again.receive(timeout_millis=300)
    finally:
        client.close()


def test_a_bare_id_without_its_topic_is_refused(broker: BrokerUnderTest, api: Any) -> None:
    """SEM-3.1 on a multi-topic consumer: an id that cannot name its topic
    cannot be routed, so its ack is refused with OperationNotSupported."""
    topics = [broker.topic("bare") for _ in range(2)]
    client = api.Client(broker.url, operation_timeout_seconds=10)
    try:
        consumer = client.subscribe(topics, "s")
        with pytest.raises(api.OperationNotSupported):
            consumer.acknowledge(api.MessageId(-1, 1, 2, -1))
    finally:
        client.close()


def test_regex_consumer_and_discovery(broker: BrokerUnderTest) -> None:
    """SEM-1: a regex subscription gets the matching topics of the namespace
    and, after pattern_auto_discovery_period (ours honours it; the official
    Python client fixes it at 60 s), topics created later."""
    broker.require("topics_of_namespace")
    tag = broker.topic("rx").rsplit("/", 1)[1]
    first = f"persistent://public/default/{tag}-a"
    later = f"persistent://public/default/{tag}-b"
    other = f"persistent://public/default/not-{tag}"
    client = magnetar_client.Client(broker.url, operation_timeout_seconds=10)
    try:
        client.create_producer(first).send(b"first")
        client.create_producer(other).send(b"other")
        consumer = client.subscribe(
            re.compile(f"public/default/{tag}-.*"),
            "rx",
            consumer_type=magnetar_client.ConsumerType.Shared,
            initial_position=magnetar_client.InitialPosition.Earliest,
            pattern_auto_discovery_period=1,
        )
        assert topics_and_data(receive_count(consumer, 1)) == [(first, b"first")]
        client.create_producer(later).send(b"later")
        assert topics_and_data(receive_count(consumer, 1)) == [
            (later, b"later")
        ]  # within a period or two
        with pytest.raises(magnetar_client.Timeout):
            consumer.receive(timeout_millis=300)
    finally:
        client.close()


def test_nack_on_a_topics_consumer_redelivers_once(broker: BrokerUnderTest) -> None:
    """Regression for Pulsar issue 20750 (SEM-3.5, SEM-3.6): on a multi-topic
    consumer with an ack timeout, a nacked message must leave the unacked
    tracker, so it comes back once (from the nack), not twice."""
    topics = [broker.topic("nack") for _ in range(2)]
    client = magnetar_client.Client(broker.url, operation_timeout_seconds=10)
    try:
        consumer = client.subscribe(
            topics,
            "s",
            consumer_type=magnetar_client.ConsumerType.Shared,
            unacked_messages_timeout_ms=1000,
            negative_ack_redelivery_delay_ms=1500,
        )
        client.create_producer(topics[1]).send(b"once")
        first = consumer.receive(timeout_millis=10000)
        consumer.negative_acknowledge(first)
        again = consumer.receive(timeout_millis=10000)
        assert again.data() == b"once" and again.redelivery_count() == 1
        consumer.acknowledge(again)
        with pytest.raises(magnetar_client.Timeout):
            consumer.receive(timeout_millis=3000)  # past both timers: nothing more
    finally:
        client.close()


def test_reconsume_later_on_a_topics_consumer(broker: BrokerUnderTest) -> None:
    """SEM-6.2 (ours: the official Python client has no retry topics): on a
    topics consumer each topic's retry topic feeds the same receive, and the
    retried message is acked through it (nothing comes again)."""
    broker.require("delayed_delivery")
    topics = [broker.topic("retry") for _ in range(2)]
    client = magnetar_client.Client(broker.url, operation_timeout_seconds=10)
    try:
        options: dict[str, Any] = {
            "consumer_type": magnetar_client.ConsumerType.Shared,
            "enable_retry": True,
            "dead_letter_policy": magnetar_client.ConsumerDeadLetterPolicy(3),
        }
        consumer = client.subscribe(topics, "s", **options)
        client.create_producer(topics[1]).send(b"again")
        consumer.reconsume_later(consumer.receive(timeout_millis=10000), 100)
        retried = consumer.receive(timeout_millis=10000)
        assert retried.data() == b"again" and retried.topic_name() == f"{topics[1]}-s-RETRY"
        assert retried.properties()["RECONSUMETIMES"] == "1"
        consumer.acknowledge(retried)
        consumer.close()
        again = client.subscribe(topics, "s", **options)
        with pytest.raises(magnetar_client.Timeout):
            again.receive(timeout_millis=500)
    finally:
        client.close()
