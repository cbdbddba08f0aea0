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

from tests.support.brokers import BrokerFactory, BrokerThread
from tests.support.http_calls import http_call
from tests.support.official import official_client


def _namespace_with_quota(broker: BrokerThread, policy: str, *, age_s: int | None = None) -> str:
    """A namespace with a 1,000-byte destination_storage quota, or with a
    message_age quota of `age_s` seconds."""
    ns = f"quota-{uuid.uuid4().hex[:6]}"
    base = f"{broker.http_url}/admin/v2/namespaces/public/{ns}"
    assert http_call("PUT", base) == (204, None)
    if age_s is None:
        quota = {"limitSize": 1000, "limitTime": -1, "policy": policy}
        url = f"{base}/backlogQuota"
    else:
        quota = {"limitSize": -1, "limitTime": age_s, "policy": policy}
        url = f"{base}/backlogQuota?backlogQuotaType=message_age"
    assert http_call("POST", url, quota) == (204, None)
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
    broker = broker_factory(backlog_quota_check_interval_seconds=0.2)
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


def _topic_url(broker: BrokerThread, topic: str) -> str:
    return f"{broker.http_url}/admin/v2/{topic.replace('://', '/')}"


def _wait_publishers(broker: BrokerThread, topic: str, count: int) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        stats = http_call("GET", f"{_topic_url(broker, topic)}/stats")[1]
        if len(stats["publishers"]) == count:
            return
        time.sleep(0.1)
    raise AssertionError(f"{topic} never had {count} publishers")


def _over_quota_producer(
    client: pulsar.Client, broker: BrokerThread, topic: str, send_timeout_ms: int
) -> pulsar.Producer:
    """A producer that filled the slow subscription's backlog past the quota
    and was then closed by the quota check (it reconnects by itself)."""
    client.subscribe(topic, "slow").close()
    producer = client.create_producer(
        topic, batching_enabled=False, send_timeout_millis=send_timeout_ms
    )
    for _ in range(20):
        producer.send(b"x" * 200)
    _wait_publishers(broker, topic, 0)
    return producer


def test_producer_exception_stops_a_connected_producer(broker_factory: BrokerFactory) -> None:
    """producer_exception on a producer already connected: the quota check
    closes it, its reconnection is refused, and its pending sends fail with
    ProducerBlockedQuotaExceededException; once the backlog is cleared the same
    producer publishes again (Pulsar's backlog quota monitor)."""
    broker = broker_factory(backlog_quota_check_interval_seconds=0.2)
    topic = _namespace_with_quota(broker, "producer_exception")
    with official_client(broker.url) as client:
        producer = _over_quota_producer(client, broker, topic, 20_000)
        with pytest.raises(pulsar.ProducerBlockedQuotaExceededException):
            producer.send(b"refused")
        assert http_call("POST", f"{_topic_url(broker, topic)}/subscription/slow/skip_all") == (
            204,
            None,
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                producer.send(b"accepted")
                break
            except pulsar.ProducerBlockedQuotaExceededException:
                assert time.monotonic() < deadline, "producer never recovered"
                time.sleep(0.2)
        producer.close()
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        bodies = []
        while reader.has_message_available():
            bodies.append(reader.read_next(5000).data())
        assert b"refused" not in bodies and bodies[-1] == b"accepted"


def test_producer_request_hold_holds_a_connected_producer(broker_factory: BrokerFactory) -> None:
    """producer_request_hold on a producer already connected: it is closed and
    its reconnection refused with ProducerBlockedQuotaExceededError, which the
    client retries, so a send made meanwhile stays pending (nothing stored)
    and completes once the backlog fits again."""
    broker = broker_factory(backlog_quota_check_interval_seconds=0.2)
    topic = _namespace_with_quota(broker, "producer_request_hold")
    with official_client(broker.url) as client:
        producer = _over_quota_producer(client, broker, topic, 60_000)
        outcome: list[tuple[object, object]] = []
        producer.send_async(b"held", lambda res, mid: outcome.append((res, mid)))
        stats_url = f"{_topic_url(broker, topic)}/stats"
        held_deadline = time.monotonic() + 1.5
        while time.monotonic() < held_deadline:
            assert not outcome, "a held send completed while over the quota"
            time.sleep(0.1)
        assert http_call("GET", stats_url)[1]["subscriptions"]["slow"]["msgBacklog"] == 20
        assert http_call("POST", f"{_topic_url(broker, topic)}/subscription/slow/skip_all") == (
            204,
            None,
        )
        deadline = time.monotonic() + 30
        while not outcome and time.monotonic() < deadline:
            time.sleep(0.1)
        assert outcome and outcome[0][0] == pulsar.Result.Ok, outcome
        assert http_call("GET", stats_url)[1]["subscriptions"]["slow"]["msgBacklog"] == 1
        producer.close()


def test_message_age_quota_refuses_producers(broker_factory: BrokerFactory) -> None:
    """A message_age quota (limitTime 1 s, producer_exception): once the
    slow subscription's oldest message is older than that, the quota check
    disconnects the producer and new ones are refused; skipping the backlog
    lets them in again."""
    broker = broker_factory(backlog_quota_check_interval_seconds=0.2)
    topic = _namespace_with_quota(broker, "producer_exception", age_s=1)
    with official_client(broker.url) as client:
        client.subscribe(topic, "slow").close()
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(b"old")
        _wait_publishers(broker, topic, 0)
        with pytest.raises(pulsar.ProducerBlockedQuotaExceededException):
            client.create_producer(topic)
        assert http_call("POST", f"{_topic_url(broker, topic)}/subscription/slow/skip_all") == (
            204,
            None,
        )
        # The next check measures no backlog at all.
        deadline = time.monotonic() + 10
        while True:
            try:
                client.create_producer(topic).close()
                break
            except pulsar.ProducerBlockedQuotaExceededException:
                assert time.monotonic() < deadline, "producers stayed refused"
                time.sleep(0.2)


def test_message_age_quota_evicts(broker_factory: BrokerFactory) -> None:
    """message_age with consumer_backlog_eviction: messages older than the
    limit are expired for the slow subscription; newer ones stay."""
    broker = broker_factory(backlog_quota_check_interval_seconds=0.2)
    topic = _namespace_with_quota(broker, "consumer_backlog_eviction", age_s=1)
    stats_url = f"{_topic_url(broker, topic)}/stats"

    def backlog() -> int:
        return int(http_call("GET", stats_url)[1]["subscriptions"]["slow"]["msgBacklog"])

    with official_client(broker.url) as client:
        client.subscribe(topic, "slow").close()
        producer = client.create_producer(topic, batching_enabled=False)
        for _ in range(3):
            producer.send(b"old")
        time.sleep(1.3)  # the three are now past the 1 s limit
        producer.send(b"new")
        deadline = time.monotonic() + 10
        while backlog() > 1:
            assert time.monotonic() < deadline, "old messages were never expired"
            time.sleep(0.2)
        assert backlog() == 1
        producer.close()
