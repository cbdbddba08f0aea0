"""Backlog quota with each of Pulsar's three policies, against a running
broker and the official client: producer_exception and
producer_request_hold refuse a new producer with a clear error while the
backlog is over the limit; consumer_backlog_eviction lets producers on and
the sweep trims the slow subscription's backlog."""

from __future__ import annotations

import time
import uuid

import pulsar
import pytest

from tests.integration.broker.harness import BrokerFactory, BrokerThread, http_call
from tests.support.official import official_client


def _namespace_with_quota(broker: BrokerThread, policy: str) -> str:
    ns = f"quota-{uuid.uuid4().hex[:6]}"
    base = f"{broker.http_url}/admin/v2/namespaces/public/{ns}"
    assert http_call("PUT", base) == (204, None)
    quota = {"limitSize": 1000, "limitTime": -1, "policy": policy}
    assert http_call("POST", f"{base}/backlogQuota", quota) == (204, None)
    return f"persistent://public/{ns}/t"


def _fill(client: pulsar.Client, topic: str) -> None:
    client.subscribe(topic, "slow").close()
    producer = client.create_producer(topic, batching_enabled=False)
    for _ in range(20):
        producer.send(b"x" * 200)
    producer.close()


@pytest.mark.parametrize("policy", ["producer_exception", "producer_request_hold"])
def test_blocking_policies_refuse_new_producers(broker: BrokerThread, policy: str) -> None:
    """Over the quota, a new producer fails with ProducerBlockedQuotaExceeded;
    once the backlog is cleared, producers are accepted again."""
    topic = _namespace_with_quota(broker, policy)
    with official_client(broker.url) as client:
        _fill(client, topic)
        with pytest.raises(pulsar.PulsarException) as caught:
            client.create_producer(topic, send_timeout_millis=3000)
        assert "Quota" in type(caught.value).__name__ or "Quota" in str(caught.value)
        url = f"{broker.http_url}/admin/v2/{topic.replace('://', '/')}"
        assert http_call("POST", f"{url}/subscription/slow/skip_all") == (204, None)
        client.create_producer(topic).close()


def test_consumer_backlog_eviction(broker_factory: BrokerFactory) -> None:
    """Producers keep publishing; the sweep skips the slow subscription's
    oldest messages until the backlog fits the quota."""
    broker = broker_factory(message_expiry_check_interval_seconds=0.2)
    topic = _namespace_with_quota(broker, "consumer_backlog_eviction")
    with official_client(broker.url) as client:
        _fill(client, topic)
    url = f"{broker.http_url}/admin/v2/{topic.replace('://', '/')}/stats"

    def backlog() -> int:
        return int(http_call("GET", url)[1]["subscriptions"]["slow"]["msgBacklog"])

    deadline = time.monotonic() + 30
    while backlog() >= 20 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert 0 < backlog() < 20
    stored = http_call("GET", url)[1]["storageSize"]
    assert backlog() * stored // 20 <= 1000 + stored // 20
