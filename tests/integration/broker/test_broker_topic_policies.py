"""Topic-level policies (issue 43): each one set on a topic takes effect
there over its namespace's value (and the broker's), through the real path:
the admin REST call, then the official client against the broker. A sibling
topic of the same namespace shows the namespace's value still holds."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pulsar
import pytest
from pulsar.schema import StringSchema

from tests.support.brokers import BrokerFactory, BrokerThread
from tests.support.certs import rsa_key_pair
from tests.support.http_calls import http_call
from tests.support.official import official_client


def _namespace(broker: BrokerThread, **policies: Any) -> str:
    """A new namespace with `policies` set through their REST paths."""
    ns = f"tp-{uuid.uuid4().hex[:6]}"
    base = f"{broker.http_url}/admin/v2/namespaces/public/{ns}"
    assert http_call("PUT", base) == (204, None)
    for path, value in policies.items():
        assert http_call("POST", f"{base}/{path}", value) == (204, None), path
    return ns


def _set(broker: BrokerThread, topic: str, path: str, value: object) -> None:
    url = f"{broker.http_url}/admin/v2/{topic.replace('://', '/')}/{path}"
    assert http_call("POST", url, value) == (204, None)


def _backlog(broker: BrokerThread, topic: str, subscription: str) -> int:
    url = f"{broker.http_url}/admin/v2/{topic.replace('://', '/')}/stats"
    return int(http_call("GET", url)[1]["subscriptions"][subscription]["msgBacklog"])


def test_topic_message_ttl_over_the_namespace(broker_factory: BrokerFactory) -> None:
    """messageTTL at topic level: the topic's 1 s TTL expires its backlog while
    the namespace (TTL 3600 s) keeps its sibling's."""
    broker = broker_factory(message_expiry_check_interval_seconds=0.2)
    ns = _namespace(broker, messageTTL=3600)
    expiring, kept = f"persistent://public/{ns}/short", f"persistent://public/{ns}/long"
    _set(broker, expiring, "messageTTL", 1)
    with official_client(broker.url) as client:
        for topic in (expiring, kept):
            client.subscribe(topic, "idle").close()
            producer = client.create_producer(topic, batching_enabled=False)
            for i in range(5):
                producer.send(f"m{i}".encode())
    deadline = time.monotonic() + 30
    while _backlog(broker, expiring, "idle") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _backlog(broker, expiring, "idle") == 0
    assert _backlog(broker, kept, "idle") == 5


def test_topic_retention_over_the_namespace(broker_factory: BrokerFactory) -> None:
    """retention at topic level: with small ledgers, a consumed topic whose
    own retention is unlimited keeps its ledgers (storageSize stays), while
    its sibling under the namespace's 0 / 0 retention has them deleted."""
    broker = broker_factory(
        managed_ledger_max_segment_size=4096, message_expiry_check_interval_seconds=0.2
    )
    ns = _namespace(broker, retention={"retentionTimeInMinutes": 0, "retentionSizeInMB": 0})
    kept, trimmed = f"persistent://public/{ns}/kept", f"persistent://public/{ns}/trimmed"
    _set(broker, kept, "retention", {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1})
    with official_client(broker.url) as client:
        for topic in (kept, trimmed):
            consumer = client.subscribe(topic, "sub")
            producer = client.create_producer(topic, batching_enabled=False)
            for i in range(200):
                producer.send(f"{i:04d}".encode() * 50)
            for _ in range(200):
                consumer.acknowledge(consumer.receive(5000))

    def storage(topic: str) -> int:
        url = f"{broker.http_url}/admin/v2/{topic.replace('://', '/')}/stats"
        return int(http_call("GET", url)[1]["storageSize"])

    full = storage(kept)
    deadline = time.monotonic() + 30
    while storage(trimmed) >= full // 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert storage(trimmed) < full // 2
    assert storage(kept) >= full


def test_topic_backlog_quota_over_the_namespace(broker: BrokerThread) -> None:
    """backlogQuota at topic level: a 1-byte producer_exception quota on one
    topic refuses its new producers once it has a backlog; the namespace has
    no quota, so its sibling takes producers as before."""
    ns = _namespace(broker)
    limited, free = f"persistent://public/{ns}/limited", f"persistent://public/{ns}/free"
    _set(broker, limited, "backlogQuota", {"limitSize": 1, "policy": "producer_exception"})
    url = f"{broker.http_url}/admin/v2/{limited.replace('://', '/')}/backlogQuotaMap"
    assert http_call("GET", url)[1]["destination_storage"]["limitSize"] == 1
    with official_client(broker.url) as client:
        for topic in (limited, free):
            client.subscribe(topic, "slow").close()
            producer = client.create_producer(topic)
            producer.send(b"x" * 100)
            producer.close()
        with pytest.raises(pulsar.ProducerBlockedQuotaExceededException):
            client.create_producer(limited)
        client.create_producer(free).send(b"y")


def test_topic_producer_and_consumer_limits(broker: BrokerThread) -> None:
    """maxProducers, maxConsumers and maxSubscriptionsPerTopic at topic level
    (1 each) over the namespace's maxProducersPerTopic / maxConsumersPerTopic /
    maxSubscriptionsPerTopic (2 each): the topic refuses the second, the
    sibling takes two."""
    ns = _namespace(
        broker, maxProducersPerTopic=2, maxConsumersPerTopic=2, maxSubscriptionsPerTopic=2
    )
    tight, loose = f"persistent://public/{ns}/tight", f"persistent://public/{ns}/loose"
    for path in ("maxProducers", "maxConsumers", "maxSubscriptionsPerTopic"):
        _set(broker, tight, path, 1)
    shared = pulsar.ConsumerType.Shared
    with official_client(broker.url) as client:
        client.create_producer(tight)
        with pytest.raises(pulsar.ProducerBusy):
            client.create_producer(tight)
        client.subscribe(tight, "a", consumer_type=shared)
        with pytest.raises(pulsar.ConsumerBusy):
            client.subscribe(tight, "a", consumer_type=shared)
        client.create_producer(loose)
        client.create_producer(loose)
        client.subscribe(loose, "a", consumer_type=shared)
        client.subscribe(loose, "b", consumer_type=shared)
    # The consumer limit gone with its consumers, the subscription limit
    # still counts the durable subscription "a".
    with official_client(broker.url) as client, pytest.raises(pulsar.NotAllowedError):
        client.subscribe(tight, "b")


def test_topic_max_consumers_per_subscription(broker: BrokerThread) -> None:
    """maxConsumersPerSubscription: the topic's 1 over the namespace's 2."""
    ns = _namespace(broker, maxConsumersPerSubscription=2)
    tight, loose = f"persistent://public/{ns}/tight", f"persistent://public/{ns}/loose"
    _set(broker, tight, "maxConsumersPerSubscription", 1)
    shared = pulsar.ConsumerType.Shared
    with official_client(broker.url) as client:
        client.subscribe(tight, "s", consumer_type=shared)
        with pytest.raises(pulsar.ConsumerBusy):
            client.subscribe(tight, "s", consumer_type=shared)
        client.subscribe(tight, "other", consumer_type=shared)
        client.subscribe(loose, "s", consumer_type=shared)
        client.subscribe(loose, "s", consumer_type=shared)
        with pytest.raises(pulsar.ConsumerBusy):
            client.subscribe(loose, "s", consumer_type=shared)


def test_topic_subscription_types_enabled(broker: BrokerThread) -> None:
    """subscriptionTypesEnabled: the topic allows Shared only, the namespace
    Exclusive and Shared; an Exclusive subscribe is NotAllowed on the topic
    alone."""
    ns = _namespace(broker, subscriptionTypesEnabled=["Exclusive", "Shared"])
    only_shared, both = f"persistent://public/{ns}/shared", f"persistent://public/{ns}/both"
    _set(broker, only_shared, "subscriptionTypesEnabled", ["Shared"])
    with official_client(broker.url) as client:
        with pytest.raises(pulsar.NotAllowedError):
            client.subscribe(only_shared, "x")
        client.subscribe(only_shared, "x", consumer_type=pulsar.ConsumerType.Shared)
        client.subscribe(both, "x")
        with pytest.raises(pulsar.NotAllowedError):
            client.subscribe(both, "y", consumer_type=pulsar.ConsumerType.Failover)


def test_topic_schema_validation_enforced(broker: BrokerThread) -> None:
    """schemaValidationEnforced at topic level (the namespace and the broker
    leave it off): a producer without a schema is refused on that topic once
    it has a schema, and welcome on the sibling that has one too."""
    ns = _namespace(broker)
    strict, lax = f"persistent://public/{ns}/strict", f"persistent://public/{ns}/lax"
    _set(broker, strict, "schemaValidationEnforced", True)
    with official_client(broker.url) as client:
        for topic in (strict, lax):
            client.create_producer(topic, schema=StringSchema()).send("typed")
        with pytest.raises(pulsar.IncompatibleSchema):
            client.create_producer(strict)
        client.create_producer(lax).send(b"raw")


def test_topic_delayed_delivery(broker: BrokerThread) -> None:
    """delayedDelivery at topic level (SEMANTICS 8.1): with active=false a
    message sent with a 60 s delay to a Shared subscription arrives at once,
    while the namespace's (active) keeps its sibling's held; a
    maxDeliveryDelayInMillis of 10 s refuses a 60 s delay."""
    ns = _namespace(broker, delayedDelivery={"active": True, "tickTime": 1000})
    off, on = f"persistent://public/{ns}/off", f"persistent://public/{ns}/on"
    capped = f"persistent://public/{ns}/capped"
    _set(broker, off, "delayedDelivery", {"active": False, "tickTime": 1000})
    _set(
        broker,
        capped,
        "delayedDelivery",
        {"active": True, "tickTime": 1000, "maxDeliveryDelayInMillis": 10_000},
    )
    shared = pulsar.ConsumerType.Shared
    with official_client(broker.url) as client:
        consumers = {t: client.subscribe(t, "s", consumer_type=shared) for t in (off, on)}
        for topic in (off, on):
            producer = client.create_producer(topic, batching_enabled=False)
            producer.send(b"later", deliver_after=timedelta(seconds=60))
        assert consumers[off].receive(timeout_millis=10000).data() == b"later"
        with pytest.raises(pulsar.Timeout):
            consumers[on].receive(timeout_millis=1500)
        producer = client.create_producer(capped, batching_enabled=False)
        with pytest.raises(pulsar.ChecksumError):
            producer.send(b"too late", deliver_after=timedelta(seconds=60))
        producer.send(b"soon", deliver_after=timedelta(seconds=1))


def test_topic_max_message_size(broker: BrokerThread) -> None:
    """maxMessageSize (topic level only in Pulsar): a 2,000-byte message is
    refused on a topic limited to 1,000 bytes, the producer goes on, and the
    sibling without the limit takes it."""
    ns = _namespace(broker)
    small, plain = f"persistent://public/{ns}/small", f"persistent://public/{ns}/plain"
    _set(broker, small, "maxMessageSize", 1000)
    with official_client(broker.url) as client:
        producer = client.create_producer(small, batching_enabled=False)
        with pytest.raises(pulsar.ChecksumError):
            producer.send(b"x" * 2000)
        producer.send(b"x" * 100)
        client.create_producer(plain, batching_enabled=False).send(b"x" * 2000)


def test_topic_auto_subscription_creation(broker: BrokerThread) -> None:
    """autoSubscriptionCreation at topic level: the topic forbids it while the
    namespace allows it; a new subscription is refused there, an existing
    one still attaches, and the sibling creates new ones."""
    ns = _namespace(broker, autoSubscriptionCreation={"allowAutoSubscriptionCreation": True})
    closed, open_ = f"persistent://public/{ns}/closed", f"persistent://public/{ns}/open"
    with official_client(broker.url) as client:
        client.subscribe(closed, "existing").close()
    _set(broker, closed, "autoSubscriptionCreation", {"allowAutoSubscriptionCreation": False})
    with official_client(broker.url) as client:
        with pytest.raises(pulsar.PulsarException):
            client.subscribe(closed, "new")
        client.subscribe(closed, "existing")
        client.subscribe(open_, "new")


def test_namespace_auto_topic_creation(broker: BrokerThread) -> None:
    """autoTopicCreation (namespace level only in Pulsar): a namespace that
    forbids it refuses producers on new topics while the broker allows it;
    one that asks for partitioned topics gets 3 partitions."""
    closed = _namespace(broker, autoTopicCreation={"allowAutoTopicCreation": False})
    partitioned = _namespace(
        broker,
        autoTopicCreation={
            "allowAutoTopicCreation": True,
            "topicType": "partitioned",
            "defaultNumPartitions": 3,
        },
    )
    with official_client(broker.url, operation_timeout_seconds=5) as client:
        with pytest.raises(pulsar.PulsarException):
            client.create_producer(f"persistent://public/{closed}/new")
        client.create_producer(f"persistent://public/{partitioned}/new").send(b"x")
    url = f"{broker.http_url}/admin/v2/persistent/public/{partitioned}/new/partitions"
    assert http_call("GET", url)[1]["partitions"] == 3


def test_namespace_max_topics(broker: BrokerThread) -> None:
    """maxTopicsPerNamespace (namespace level only in Pulsar): with 2 topics
    the third new one is refused (NotAllowed); existing ones stay usable."""
    ns = _namespace(broker, maxTopicsPerNamespace=2)
    with official_client(broker.url, operation_timeout_seconds=5) as client:
        client.create_producer(f"persistent://public/{ns}/a").send(b"a")
        client.create_producer(f"non-persistent://public/{ns}/b")
        with pytest.raises(pulsar.NotAllowedError):
            client.create_producer(f"persistent://public/{ns}/c")
        client.create_producer(f"persistent://public/{ns}/a").send(b"again")


def test_namespace_encryption_required(broker: BrokerThread, tmp_path: Path) -> None:
    """encryptionRequired (namespace level only in Pulsar): a producer that
    does not encrypt is refused; one with an encryption key is accepted and
    its message arrives encrypted (the consumer decrypts it)."""
    ns = _namespace(broker, encryptionRequired=True)
    topic = f"persistent://public/{ns}/secret"
    reader = pulsar.CryptoKeyReader(*rsa_key_pair(tmp_path, "k"))
    with official_client(broker.url) as client:
        with pytest.raises(pulsar.NotAllowedError):
            client.create_producer(topic)
        consumer = client.subscribe(topic, "s", crypto_key_reader=reader)
        producer = client.create_producer(
            topic, encryption_key="k", crypto_key_reader=reader, batching_enabled=False
        )
        producer.send(b"hidden")
        assert consumer.receive(timeout_millis=10000).data() == b"hidden"
