"""Deleting what stays idle, through the real path: inactiveTopicPolicies
(topic level over the namespace's) and the namespace's
subscriptionExpirationTime, set over REST and enforced by the broker's
periodic sweep while the official client produces and consumes."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pulsar

from tests.support.brokers import BrokerFactory, BrokerThread
from tests.support.http_calls import http_call
from tests.support.official import official_client


def _namespace(broker: BrokerThread, **policies: Any) -> str:
    ns = f"ia-{uuid.uuid4().hex[:6]}"
    base = f"{broker.http_url}/admin/v2/namespaces/public/{ns}"
    assert http_call("PUT", base) == (204, None)
    for path, value in policies.items():
        assert http_call("POST", f"{base}/{path}", value) == (204, None), path
    return ns


def _topics(broker: BrokerThread, ns: str) -> list[str]:
    code, body = http_call("GET", f"{broker.http_url}/admin/v2/namespaces/public/{ns}/topics")
    assert code == 200
    return list(body)


def _subscriptions(broker: BrokerThread, topic: str) -> list[str]:
    url = f"{broker.http_url}/admin/v2/{topic.replace('://', '/')}/subscriptions"
    code, body = http_call("GET", url)
    assert code == 200
    return sorted(body)


def test_topic_inactive_policy_over_the_namespace(broker_factory: BrokerFactory) -> None:
    """inactiveTopicPolicies at topic level (delete after 2 s idle) deletes the
    topic once its producer has gone; its sibling runs with the namespace's
    policy (no deletion) and stays. An open producer keeps the topic."""
    broker = broker_factory(message_expiry_check_interval_seconds=0.2)
    keep = {"inactiveTopicDeleteMode": "delete_when_no_subscriptions", "deleteWhileInactive": False}
    ns = _namespace(broker, inactiveTopicPolicies=keep)
    idle, kept = f"persistent://public/{ns}/idle", f"persistent://public/{ns}/kept"
    delete = {
        "inactiveTopicDeleteMode": "delete_when_no_subscriptions",
        "maxInactiveDurationSeconds": 2,
        "deleteWhileInactive": True,
    }
    url = f"{broker.http_url}/admin/v2/{idle.replace('://', '/')}/inactiveTopicPolicies"
    assert http_call("POST", url, delete) == (204, None)
    with official_client(broker.url) as client:
        producers = [client.create_producer(t) for t in (idle, kept)]
        for producer in producers:
            producer.send(b"m")
        time.sleep(3)  # longer than 2 s, but the producer is connected
        assert _topics(broker, ns) == [idle, kept]
        for producer in producers:
            producer.close()
        closed = time.monotonic()
        deadline = closed + 30
        while idle in _topics(broker, ns) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _topics(broker, ns) == [kept]
        assert time.monotonic() - closed >= 1.5
        time.sleep(1)
        assert _topics(broker, ns) == [kept]
        # Deleted as the admin DELETE deletes it: its message is gone too.
        reader = client.create_reader(idle, pulsar.MessageId.earliest)
        assert not reader.has_message_available()


def test_idle_subscription_expires(broker_factory: BrokerFactory) -> None:
    """subscriptionExpirationTime (1 minute): a durable subscription left
    without consumers is deleted while one with a consumer stays. The sweep's
    clock is moved two minutes on instead of waiting."""
    broker = broker_factory(message_expiry_check_interval_seconds=0.2)
    ns = _namespace(broker, subscriptionExpirationTime=1)
    topic = f"persistent://public/{ns}/t"
    assert broker.server is not None and broker.server.service is not None
    expiry = broker.server.service.expiry
    shift = [0.0]
    expiry.clock = lambda: time.time() + shift[0]
    with official_client(broker.url) as client:
        client.subscribe(topic, "idle").close()
        active = client.subscribe(topic, "active")
        time.sleep(1)  # sweeps see "idle" idle from now on
        assert _subscriptions(broker, topic) == ["active", "idle"]
        shift[0] = 120.0
        deadline = time.monotonic() + 30
        while "idle" in _subscriptions(broker, topic) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _subscriptions(broker, topic) == ["active"]
        shift[0] = 600.0
        time.sleep(1)
        assert _subscriptions(broker, topic) == ["active"]
        active.close()
