"""maxUnackedMessagesOnConsumer / OnSubscription through the real path: the
admin REST call, then the official client. A consumer (a subscription) at
its limit gets nothing more until acks bring it to half; the topic's value
wins over its namespace's, whose value still holds for a sibling topic."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pulsar

from tests.support.brokers import BrokerThread
from tests.support.http_calls import http_call
from tests.support.official import official_client


def _namespace(broker: BrokerThread, **policies: Any) -> str:
    ns = f"unacked-{uuid.uuid4().hex[:6]}"
    base = f"{broker.http_url}/admin/v2/namespaces/public/{ns}"
    assert http_call("PUT", base) == (204, None)
    for path, value in policies.items():
        assert http_call("POST", f"{base}/{path}", value) == (204, None), path
    return ns


def _topic_url(broker: BrokerThread, topic: str, path: str) -> str:
    return f"{broker.http_url}/admin/v2/{topic.replace('://', '/')}/{path}"


def _subscription_stats(broker: BrokerThread, topic: str) -> dict[str, Any]:
    status, body = http_call("GET", _topic_url(broker, topic, "stats"))
    assert status == 200
    return dict(body["subscriptions"]["s"])


def _receive_all(consumer: Any, *, ack: bool, timeout_ms: int = 1000) -> list[Any]:
    """Everything the consumer gets until nothing comes for `timeout_ms`."""
    received: list[Any] = []
    while True:
        try:
            message = consumer.receive(timeout_millis=timeout_ms)
        except pulsar.Timeout:
            return received
        received.append(message)
        if ack:
            consumer.acknowledge(message)


def _send(client: Any, topic: str, count: int) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(count):
        producer.send(f"m{i}".encode())
    producer.close()


def test_consumer_limit_on_the_topic_over_the_namespace(broker: BrokerThread) -> None:
    """maxUnackedMessagesOnConsumer 5 on the topic, 100 on its namespace: a
    Shared consumer that never acks gets 5 and the other consumer the rest;
    after it acks it gets more. On a sibling topic the namespace's 100 lets
    a consumer that never acks take all 30."""
    ns = _namespace(broker, maxUnackedMessagesPerConsumer=100)
    limited, sibling = f"persistent://public/{ns}/limited", f"persistent://public/{ns}/sibling"
    assert http_call("POST", _topic_url(broker, limited, "maxUnackedMessagesOnConsumer"), 5) == (
        204,
        None,
    )
    shared = pulsar.ConsumerType.Shared
    with official_client(broker.url) as client:
        slow = client.subscribe(limited, "s", consumer_type=shared, consumer_name="slow")
        fast = client.subscribe(limited, "s", consumer_type=shared, consumer_name="fast")
        _send(client, limited, 30)
        got_fast = _receive_all(fast, ack=True)
        got_slow = _receive_all(slow, ack=False, timeout_ms=300)
        assert len(got_slow) == 5
        assert len(got_fast) == 25
        consumers = {
            c["consumerName"]: c for c in _subscription_stats(broker, limited)["consumers"]
        }
        assert consumers["slow"]["blockedConsumerOnUnackedMsgs"] is True
        assert consumers["slow"]["unackedMessages"] == 5
        assert consumers["fast"]["blockedConsumerOnUnackedMsgs"] is False

        fast.close()
        _send(client, limited, 10)
        assert _receive_all(slow, ack=False, timeout_ms=300) == []  # still blocked
        for message in got_slow:
            slow.acknowledge(message)
        assert len(_receive_all(slow, ack=False)) == 5  # resumed, up to its limit again

        other = client.subscribe(sibling, "s", consumer_type=shared)
        _send(client, sibling, 30)
        assert len(_receive_all(other, ack=False)) == 30


def test_subscription_limit_on_the_topic_over_the_namespace(broker: BrokerThread) -> None:
    """maxUnackedMessagesOnSubscription 8 on the topic (the namespace says
    100): its two consumers get 8 between them and wait; acks that bring the
    subscription below half (3 left) let it run up to 8 again."""
    ns = _namespace(broker, maxUnackedMessagesPerSubscription=100)
    topic = f"persistent://public/{ns}/t"
    assert http_call("POST", _topic_url(broker, topic, "maxUnackedMessagesOnSubscription"), 8) == (
        204,
        None,
    )
    status, applied = http_call(
        "GET", _topic_url(broker, topic, "maxUnackedMessagesOnSubscription?applied=true")
    )
    assert (status, applied) == (200, 8)
    shared = pulsar.ConsumerType.Shared
    with official_client(broker.url) as client:
        consumers = [client.subscribe(topic, "s", consumer_type=shared) for _ in range(2)]
        _send(client, topic, 30)
        got = [_receive_all(c, ack=False, timeout_ms=300) for c in consumers]
        assert sum(len(g) for g in got) == 8
        stats = _subscription_stats(broker, topic)
        assert stats["blockedSubscriptionOnUnackedMsgs"] is True
        assert stats["unackedMessages"] == 8
        # Ack 5 of the 8, each through the consumer that received it.
        pending = [(c, m) for c, received in zip(consumers, got, strict=True) for m in received]
        for consumer, message in pending[:5]:
            consumer.acknowledge(message)
        more: list[Any] = []
        deadline = time.monotonic() + 10
        while len(more) < 5 and time.monotonic() < deadline:
            for consumer in consumers:
                more += _receive_all(consumer, ack=False, timeout_ms=200)
        assert len(more) == 5
        assert _receive_all(consumers[0], ack=False, timeout_ms=300) == []
