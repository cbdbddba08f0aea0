"""Namespace-wide subscription operations and the standalone bundle (issue
43), through a real broker with the official client: Pulsar's paths,
statuses and bodies for clearBacklog, unsubscribe, bundles, bundle unload
and topicHashPositions."""

from __future__ import annotations

import uuid
import zlib
from typing import Any

from tests.support.brokers import BrokerThread
from tests.support.http_calls import http_call
from tests.support.official import official_client

BUNDLE = "0x00000000_0xffffffff"


def _namespace(broker: BrokerThread) -> str:
    """A fresh namespace of tenant `public`; its name."""
    name = f"public/ns-{uuid.uuid4().hex[:8]}"
    assert http_call("PUT", f"{broker.http_url}/admin/v2/namespaces/{name}") == (204, None)
    return name


def _backlogs(broker: BrokerThread, topic: str) -> dict[str, int]:
    path = topic.replace("persistent://", "persistent/")
    status, stats = http_call("GET", f"{broker.http_url}/admin/v2/{path}/stats")
    assert status == 200
    return {name: s["msgBacklog"] for name, s in stats["subscriptions"].items()}


def _topics_with_backlog(broker: BrokerThread, namespace: str, client: Any) -> list[str]:
    """Two topics, each with subscriptions s1 and s2 (consumers closed) and
    three messages in their backlog."""
    topics = [f"persistent://{namespace}/t{i}" for i in range(2)]
    for topic in topics:
        for sub in ("s1", "s2"):
            client.subscribe(topic, sub).close()
        producer = client.create_producer(topic)
        for i in range(3):
            producer.send(f"m{i}".encode())
        producer.close()
        assert _backlogs(broker, topic) == {"s1": 3, "s2": 3}
    return topics


def test_namespace_clear_backlog_one_subscription_then_all(broker: BrokerThread) -> None:
    """Pulsar's POST namespaces/{t}/{n}/clearBacklog/{sub} clears that
    subscription on every topic of the namespace (others keep theirs), and
    POST .../clearBacklog clears every subscription; both answer 204. An
    unknown namespace is 404."""
    namespace = _namespace(broker)
    base = f"{broker.http_url}/admin/v2/namespaces/{namespace}"
    with official_client(broker.url) as client:
        topics = _topics_with_backlog(broker, namespace, client)
        assert http_call("POST", f"{base}/clearBacklog/s1") == (204, None)
        for topic in topics:
            assert _backlogs(broker, topic) == {"s1": 0, "s2": 3}
        assert http_call("POST", f"{base}/clearBacklog") == (204, None)
        for topic in topics:
            assert _backlogs(broker, topic) == {"s1": 0, "s2": 0}
    missing = f"{broker.http_url}/admin/v2/namespaces/public/nope-{uuid.uuid4().hex[:6]}"
    status, body = http_call("POST", f"{missing}/clearBacklog")
    assert status == 404 and "reason" in body


def test_namespace_unsubscribe_refused_with_consumers_then_deletes(broker: BrokerThread) -> None:
    """Pulsar's POST namespaces/{t}/{n}/unsubscribe/{sub}: 412 "Subscription
    has active connected consumers" while a consumer is attached; once it
    is gone, 204 and the subscription is deleted on every topic (the other
    subscriptions stay)."""
    namespace = _namespace(broker)
    url = f"{broker.http_url}/admin/v2/namespaces/{namespace}/unsubscribe/s1"
    with official_client(broker.url) as client:
        topics = _topics_with_backlog(broker, namespace, client)
        consumer = client.subscribe(topics[1], "s1")
        status, body = http_call("POST", url)
        assert status == 412 and "active connected consumers" in body["reason"]
        assert all(set(_backlogs(broker, t)) == {"s1", "s2"} for t in topics)
        consumer.close()
        assert http_call("POST", url) == (204, None)
        for topic in topics:
            assert _backlogs(broker, topic) == {"s2": 3}


def test_standalone_bundles_and_bundle_operations(broker: BrokerThread) -> None:
    """A standalone broker's namespace is one bundle covering the hash range:
    GET bundles answers Pulsar's BundlesData; that bundle's clearBacklog,
    clearBacklog/{sub}, unsubscribe/{sub} act on the namespace's topics and
    answer 204; a range that is not one of its bundles is 412, as Pulsar's
    validateNamespaceBundleRange answers."""
    namespace = _namespace(broker)
    base = f"{broker.http_url}/admin/v2/namespaces/{namespace}"
    assert http_call("GET", f"{base}/bundles") == (
        200,
        {"boundaries": ["0x00000000", "0xffffffff"], "numBundles": 1},
    )
    with official_client(broker.url) as client:
        topics = _topics_with_backlog(broker, namespace, client)
        assert http_call("POST", f"{base}/{BUNDLE}/clearBacklog/s2") == (204, None)
        assert _backlogs(broker, topics[0]) == {"s1": 3, "s2": 0}
        assert http_call("POST", f"{base}/{BUNDLE}/clearBacklog") == (204, None)
        assert _backlogs(broker, topics[1]) == {"s1": 0, "s2": 0}
        assert http_call("POST", f"{base}/{BUNDLE}/unsubscribe/s1") == (204, None)
        assert _backlogs(broker, topics[0]) == {"s2": 0}
    for bad in ("0x00000000_0x80000000", "nonsense"):
        for method, suffix in (
            ("POST", "clearBacklog"),
            ("POST", "unsubscribe/s2"),
            ("PUT", "unload"),
            ("GET", "topicHashPositions"),
        ):
            status, body = http_call(method, f"{base}/{bad}/{suffix}")
            assert status == 412 and "reason" in body, (bad, suffix)


def test_bundle_unload_and_clients_come_back(broker: BrokerThread) -> None:
    """PUT namespaces/{t}/{n}/{bundle}/unload closes the bundle's loaded
    topics (204); the official client reconnects and keeps producing and
    consuming, as after Pulsar's bundle unload."""
    namespace = _namespace(broker)
    topic = f"persistent://{namespace}/moving"
    url = f"{broker.http_url}/admin/v2/namespaces/{namespace}/{BUNDLE}/unload"
    with official_client(broker.url) as client:
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic)
        producer.send(b"before")
        assert http_call("PUT", url) == (204, None)
        assert topic not in broker.call(_loaded(broker))
        producer.send(b"after")
        got = [consumer.receive(timeout_millis=10000).data() for _ in range(2)]
        assert got == [b"before", b"after"]


async def _loaded(broker: BrokerThread) -> list[str]:
    assert broker.server is not None and broker.server.service is not None
    return list(broker.server.service.topics)


def test_topic_hash_positions(broker: BrokerThread) -> None:
    """Pulsar's TopicHashPositions: the bundle's topics (or those named by
    `topics`; a partitioned topic's name stands for its partitions) with
    their position in the hash range: CRC-32 of the full name, Pulsar's
    default bundle hash."""
    namespace = _namespace(broker)
    base = f"{broker.http_url}/admin/v2/namespaces/{namespace}"
    plain = f"persistent://{namespace}/plain"
    parted = f"persistent://{namespace}/parted"
    assert http_call("PUT", f"{broker.http_url}/admin/v2/persistent/{namespace}/plain") == (
        204,
        None,
    )
    assert http_call(
        "PUT", f"{broker.http_url}/admin/v2/persistent/{namespace}/parted/partitions", 2
    ) == (204, None)

    def crc(name: str) -> int:
        return zlib.crc32(name.encode())

    partitions = [f"{parted}-partition-{i}" for i in range(2)]
    status, body = http_call("GET", f"{base}/{BUNDLE}/topicHashPositions")
    assert status == 200
    assert body == {
        "namespace": namespace,
        "bundle": BUNDLE,
        "topicHashPositions": {t: crc(t) for t in [plain, *partitions]},
    }
    status, body = http_call("GET", f"{base}/{BUNDLE}/topicHashPositions?topics={parted}")
    assert status == 200 and body["topicHashPositions"] == {t: crc(t) for t in partitions}
