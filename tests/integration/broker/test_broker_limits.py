"""Limits (issue 15): connections in total and per address, producers,
consumers and subscriptions per topic. The client over a limit gets a clear
error; the others keep working, and a freed slot is usable again."""

from __future__ import annotations

import time
import urllib.request
import uuid

import pulsar
import pytest

from magnetar.proto import pulsar_api_pb2 as pb
from tests.support.brokers import BrokerFactory, BrokerThread
from tests.support.http_calls import http_call
from tests.support.official import official_client
from tests.support.raw_client import RawClient

T = pb.BaseCommand


def _topic() -> str:
    return f"persistent://public/default/limits-{uuid.uuid4().hex[:8]}"


def test_connections_per_address(broker_factory: BrokerFactory) -> None:
    """The third connection from one address is refused with an ERROR that
    says why, then closed; the two open ones still work; closing one frees
    its slot."""
    broker = broker_factory(max_connections_per_ip=2)
    first, second = RawClient.for_broker(broker), RawClient.for_broker(broker)
    first.connect()
    second.connect()
    with RawClient.for_broker(broker) as third:
        frames = third.wait_closed()
        errors = [f.command.error for f in frames if f.type == T.ERROR]
        assert errors and errors[0].error == pb.ServerError.NotAllowedError
        assert "limit of 2 connections per address" in errors[0].message
    first.send(pb.CommandPing())
    first.expect(T.PONG)
    second.close()
    with RawClient.for_broker(broker) as again:
        again.connect()
    first.close()


def test_connections_in_total(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(max_connections=1)
    with RawClient.for_broker(broker) as only:
        only.connect()
        with RawClient.for_broker(broker) as refused:
            errors = [f.command.error for f in refused.wait_closed() if f.type == T.ERROR]
            assert "limit of 1 connections" in errors[0].message
        only.send(pb.CommandPing())
        only.expect(T.PONG)


def test_producers_per_topic(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(max_producers_per_topic=2)
    topic = _topic()
    with official_client(broker.url) as client:
        kept = [client.create_producer(topic), client.create_producer(topic)]
        with pytest.raises(pulsar.ProducerBusy):
            client.create_producer(topic)
        client.create_producer(_topic()).send(b"another topic is not limited")
        kept[0].close()
        client.create_producer(topic).send(b"a freed slot is usable")
        kept[1].send(b"the others are unaffected")


def test_consumers_and_subscriptions_per_topic(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(max_consumers_per_topic=2, max_subscriptions_per_topic=2)
    topic = _topic()
    shared = pulsar.ConsumerType.Shared
    with official_client(broker.url) as client:
        a = client.subscribe(topic, "a", consumer_type=shared)
        b = client.subscribe(topic, "b", consumer_type=shared)
        with pytest.raises(pulsar.ConsumerBusy):
            client.subscribe(topic, "a", consumer_type=shared)  # a third consumer
        b.close()
        # Subscription "b" still exists (durable): a third subscription is refused.
        with pytest.raises(pulsar.PulsarException, match="NotAllowed"):
            client.subscribe(topic, "c", consumer_type=shared)
        again = client.subscribe(topic, "b", consumer_type=shared)
        client.create_producer(topic).send(b"x")
        assert a.receive(timeout_millis=5000).data() == b"x"
        assert again.receive(timeout_millis=5000).data() == b"x"


def test_namespace_policy_limits_override_the_broker(broker: BrokerThread) -> None:
    """A namespace created with max_producers_per_topic and
    max_consumers_per_topic in its policies (Pulsar's Policies fields, as the
    C++ suite's ProducerTest.testCloseSubProducerWhenFail sets them) limits
    its topics; the broker's own setting (none here) applies elsewhere."""
    ns = f"limits-{uuid.uuid4().hex[:6]}"
    body = {"max_producers_per_topic": 1, "max_consumers_per_topic": 1}
    assert http_call("PUT", f"{broker.http_url}/admin/v2/namespaces/public/{ns}", body)[0] == 204
    topic = f"persistent://public/{ns}/t"
    with official_client(broker.url) as client:
        client.create_producer(topic)
        with pytest.raises(pulsar.ProducerBusy):
            client.create_producer(topic)
        client.subscribe(topic, "a")
        with pytest.raises(pulsar.ConsumerBusy):
            client.subscribe(topic, "b")
        elsewhere = _topic()
        client.create_producer(elsewhere)
        client.create_producer(elsewhere)


def test_pending_publish_bytes_per_connection(broker_factory: BrokerFactory) -> None:
    """A connection with more unanswered publish bytes than the limit stops
    being read until receipts drain it; nothing is refused or lost."""
    broker = broker_factory(max_pending_publish_bytes_per_connection=256 * 1024)
    topic = _topic()
    with official_client(broker.url) as client:
        consumer = client.subscribe(topic, "all")
        producer = client.create_producer(
            topic, batching_enabled=False, block_if_queue_full=True, max_pending_messages=100
        )
        for i in range(40):
            producer.send_async(bytes([i]) * (200 * 1024), None)
        producer.flush()
        for i in range(40):
            msg = consumer.receive(timeout_millis=10000)
            assert msg.data() == bytes([i]) * (200 * 1024)
            consumer.acknowledge(msg)
    with urllib.request.urlopen(f"{broker.http_url}/metrics", timeout=10) as response:
        text = response.read().decode()
    name = "magnetar_connection_read_pauses_total"
    pauses = [line for line in text.splitlines() if line.startswith(name)]
    assert float(pauses[0].split()[-1]) >= 1


def test_publish_rate_policy(broker: BrokerThread) -> None:
    """A namespace publishRate of 100 msg/s slows an official producer down by
    backpressure (nothing is refused); a topic policy overrides it and DELETE
    removes it again."""
    base = f"{broker.http_url}/admin/v2/namespaces/public/default"
    rate = {"publishThrottlingRateInMsg": 100, "publishThrottlingRateInByte": -1}
    assert http_call("POST", f"{base}/publishRate", rate) == (204, None)
    assert http_call("GET", f"{base}/publishRate") == (200, rate)
    assert http_call("POST", f"{base}/publishRate", {"publishThrottlingRateInMsg": "x"})[0] == 400
    topic = _topic()
    try:
        with official_client(broker.url) as client:
            producer = client.create_producer(topic, batching_enabled=False)
            started = time.monotonic()
            for i in range(250):
                producer.send_async(b"%d" % i, None)
            producer.flush()
            # 250 messages at 100 per second need at least two full seconds.
            assert time.monotonic() - started >= 1.9
            topic_url = f"{broker.http_url}/admin/v2/{topic.replace('://', '/')}/publishRate"
            unlimited = {"publishThrottlingRateInMsg": -1, "publishThrottlingRateInByte": -1}
            assert http_call("POST", topic_url, unlimited)[0] == 204
            earliest = pulsar.InitialPosition.Earliest
            consumer = client.subscribe(topic, "all", initial_position=earliest)
            assert len({consumer.receive(timeout_millis=5000).data() for _ in range(250)}) == 250
    finally:
        assert http_call("DELETE", f"{base}/publishRate")[0] == 204
    assert http_call("GET", f"{base}/publishRate") == (200, None)


def test_dispatch_rate_policy(broker: BrokerThread) -> None:
    """A topic dispatchRate of 100 msg/s: a consumer of a 250-message backlog
    gets at most about 100 per second (nothing is dropped); removing the
    policy lets the rest come at once."""
    topic = _topic()
    url = f"{broker.http_url}/admin/v2/{topic.replace('://', '/')}/dispatchRate"
    with official_client(broker.url) as client:
        consumer = client.subscribe(topic, "all", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic, batching_enabled=False)
        rate = {"dispatchThrottlingRateInMsg": 100, "dispatchThrottlingRateInByte": -1}
        assert http_call("POST", url, rate)[0] == 204
        assert http_call("GET", url)[1]["dispatchThrottlingRateInMsg"] == 100
        started = time.monotonic()  # no period of the quota starts before this
        for i in range(250):
            producer.send_async(b"%d" % i, None)
        producer.flush()
        got = set()
        for _ in range(250):
            msg = consumer.receive(timeout_millis=10000)
            got.add(msg.data())
            consumer.acknowledge(msg)
        # 250 messages at 100 per second: three periods, so at least two seconds.
        assert time.monotonic() - started >= 1.9
        assert len(got) == 250
        assert http_call("DELETE", url)[0] == 204
        for i in range(250):
            producer.send_async(b"x%d" % i, None)
        producer.flush()
        for _ in range(250):
            consumer.acknowledge(consumer.receive(timeout_millis=10000))
