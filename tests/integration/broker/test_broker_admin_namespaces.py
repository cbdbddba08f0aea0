"""Tenants, namespaces, clusters and partitioned topics over the admin REST
API (Pulsar's admin v2 paths, statuses and `{"reason": ...}` bodies), and
what the wire says about topics in namespaces that do not exist."""

from __future__ import annotations

import uuid

import pulsar
import pytest

from tests.support.brokers import BrokerThread
from tests.support.http_calls import http_call
from tests.support.official import official_client


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_defaults_exist_after_first_start(broker: BrokerThread) -> None:
    """Standalone creates cluster `standalone`, tenant `public`, namespace
    `public/default` on first start, as Pulsar's standalone does."""
    base = f"{broker.http_url}/admin/v2"
    assert http_call("GET", f"{base}/clusters") == (200, ["standalone"])
    assert http_call("GET", f"{base}/tenants") == (200, ["public"])
    assert http_call("GET", f"{base}/namespaces/public") == (200, ["public/default"])
    status, info = http_call("GET", f"{base}/tenants/public")
    assert status == 200 and set(info) >= {"adminRoles", "allowedClusters"}


def test_tenant_lifecycle_and_errors(broker: BrokerThread) -> None:
    base = f"{broker.http_url}/admin/v2/tenants"
    tenant = _name("t")
    info = {"adminRoles": ["admin"], "allowedClusters": ["standalone"]}
    assert http_call("PUT", f"{base}/{tenant}", info) == (204, None)
    assert http_call("GET", f"{base}/{tenant}") == (200, info)
    status, body = http_call("PUT", f"{base}/{tenant}", info)
    assert status == 409 and "already exists" in body["reason"]
    status, body = http_call("PUT", f"{base}/{_name('t')}", {"allowedClusters": ["nowhere"]})
    assert status == 412 and "nowhere" in body["reason"]
    status, body = http_call("GET", f"{base}/{_name('missing')}")
    assert status == 404 and "does not exist" in body["reason"]
    # A tenant with a namespace cannot go.
    ns_url = f"{broker.http_url}/admin/v2/namespaces/{tenant}/ns1"
    assert http_call("PUT", ns_url) == (204, None)
    status, body = http_call("DELETE", f"{base}/{tenant}")
    assert status == 412 and "namespaces" in body["reason"]
    assert http_call("DELETE", ns_url) == (204, None)
    assert http_call("DELETE", f"{base}/{tenant}") == (204, None)
    assert http_call("DELETE", f"{base}/{tenant}")[0] == 404


def test_namespace_lifecycle_and_errors(broker: BrokerThread) -> None:
    base = f"{broker.http_url}/admin/v2/namespaces"
    policies = {"auth_policies": {"namespace_auth": {"anonymous": ["produce", "consume"]}}}
    ns = _name("ns")
    assert http_call("PUT", f"{base}/public/{ns}", policies) == (204, None)
    assert http_call("GET", f"{base}/public/{ns}") == (200, policies)
    assert f"public/{ns}" in http_call("GET", f"{base}/public")[1]
    assert http_call("PUT", f"{base}/public/{ns}")[0] == 409
    assert http_call("GET", f"{base}/public/{_name('none')}")[0] == 404
    status, body = http_call("PUT", f"{base}/{_name('no-tenant')}/x")
    assert status == 404 and "tenant" in body["reason"]
    status, body = http_call("PUT", f"{base}/public/{_name('ns')}", [1, 2])
    assert status == 400 and "JSON object" in body["reason"]
    # A namespace with a topic cannot be deleted.
    with official_client(broker.url) as client:
        client.create_producer(f"persistent://public/{ns}/t").send(b"x")
        status, body = http_call("DELETE", f"{base}/public/{ns}")
        assert status == 412 and "topic" in body["reason"]


def test_topic_in_unknown_namespace_is_topic_not_found(broker: BrokerThread) -> None:
    """Issue 9: LOOKUP / PRODUCER / SUBSCRIBE on a missing namespace fail with
    TopicNotFound, which the official client reports as such."""
    topic = f"persistent://{_name('tenant')}/ns/t"
    with official_client(broker.url) as client:
        with pytest.raises(pulsar.TopicNotFound):
            client.create_producer(topic)
        with pytest.raises(pulsar.TopicNotFound):
            client.subscribe(topic, "s")


def test_partitioned_topic_admin(broker: BrokerThread) -> None:
    """PUT creates (409 when it exists), GET reads, POST grows (never shrinks),
    DELETE removes; the official client sees the partitions."""
    local = _name("pt")
    url = f"{broker.http_url}/admin/v2/persistent/public/default/{local}/partitions"
    topic = f"persistent://public/default/{local}"
    assert http_call("PUT", url, 3) == (204, None)
    assert http_call("PUT", url, 3)[0] == 409
    assert http_call("GET", url) == (200, {"partitions": 3})
    assert http_call("PUT", url.replace(local, _name("bad")), 0)[0] == 412
    assert http_call("PUT", url.replace(local, _name("bad")), "x")[0] == 400
    with official_client(broker.url) as client:
        assert client.get_topic_partitions(topic) == [f"{topic}-partition-{i}" for i in range(3)]
    assert http_call("POST", url, 2)[0] == 412
    assert http_call("POST", url, 5) == (204, None)
    assert http_call("GET", url) == (200, {"partitions": 5})
    listed = http_call("GET", f"{broker.http_url}/admin/v2/persistent/public/default/partitioned")
    assert topic in listed[1]
    assert http_call("DELETE", url) == (204, None)
    assert http_call("GET", url) == (200, {"partitions": 0})
    assert http_call("DELETE", url)[0] == 404


def test_http_service_url(broker: BrokerThread) -> None:
    """Issue 9: a client given the HTTP URL looks topics up over HTTP."""
    topic = f"persistent://public/default/{_name('http')}"
    with official_client(broker.http_url) as client:
        consumer = client.subscribe(topic, "s")
        client.create_producer(topic).send(b"over http lookup")
        assert consumer.receive(timeout_millis=5000).data() == b"over http lookup"
    status, body = http_call(
        "GET", f"{broker.http_url}/lookup/v2/topic/persistent/public/default/t"
    )
    assert status == 200 and body["brokerUrl"] == broker.url


def test_namespace_unload_closes_its_topics_and_clients_come_back(broker: BrokerThread) -> None:
    """Pulsar's namespace unload: every loaded topic of the namespace closes
    (others stay), connected clients look their topics up again and go on."""
    ns = f"unload-{uuid.uuid4().hex[:6]}"
    base = f"{broker.http_url}/admin/v2/namespaces/public/{ns}"
    assert http_call("PUT", base)[0] == 204
    topics = [f"persistent://public/{ns}/t{i}" for i in range(3)]
    other = f"persistent://public/default/stays-{uuid.uuid4().hex[:6]}"
    assert broker.server is not None and broker.server.service is not None
    loaded = broker.server.service.topics
    with official_client(broker.url) as client:
        consumer = client.subscribe(topics, "s")
        producers = [client.create_producer(t) for t in [*topics, other]]
        for producer in producers:
            producer.send(b"before")
        for _ in range(3):
            consumer.acknowledge(consumer.receive(timeout_millis=10_000))
        assert all(t in loaded for t in [*topics, other])
        assert http_call("PUT", f"{base}/unload")[0] == 204
        assert not any(t in loaded for t in topics)
        assert other in loaded
        for i, producer in enumerate(producers[:3]):
            producer.send(b"after-%d" % i)  # the client reconnects; the topic loads again
        got: set[bytes] = set()
        for _ in range(6):  # acks sent just before the unload may be redelivered
            data = consumer.receive(timeout_millis=10_000).data()
            if data != b"before":
                got.add(data)
            if len(got) == 3:
                break
        assert got == {b"after-0", b"after-1", b"after-2"}
    assert http_call("PUT", f"{broker.http_url}/admin/v2/namespaces/public/nope/unload")[0] == 404


def test_cluster_update_and_delete(broker: BrokerThread) -> None:
    """POST /clusters/{c} replaces a cluster's data (404 for an unknown one);
    DELETE refuses (412) while a tenant may use the cluster or the brokers
    serve it, and removes it otherwise."""
    base = f"{broker.http_url}/admin/v2"
    cluster, tenant = _name("c"), _name("t")
    url = f"{base}/clusters/{cluster}"
    assert http_call("POST", url, {"serviceUrl": "http://a:8080"})[0] == 404
    assert http_call("PUT", url, {"serviceUrl": "http://a:8080"}) == (204, None)
    assert http_call("POST", url, {"serviceUrl": "http://b:8080"}) == (204, None)
    assert http_call("GET", url) == (200, {"serviceUrl": "http://b:8080"})
    info = {"adminRoles": [], "allowedClusters": [cluster]}
    assert http_call("PUT", f"{base}/tenants/{tenant}", info) == (204, None)
    assert http_call("DELETE", url)[0] == 412
    assert http_call("DELETE", f"{base}/clusters/standalone")[0] == 412
    assert http_call("DELETE", f"{base}/tenants/{tenant}") == (204, None)
    assert http_call("DELETE", url) == (204, None)
    assert http_call("GET", url)[0] == 404
    assert http_call("DELETE", url)[0] == 404
