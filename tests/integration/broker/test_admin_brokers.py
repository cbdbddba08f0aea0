"""Admin v2 `brokers` and `broker-stats` on a standalone broker (issue 43),
over HTTP against a running broker: Pulsar's paths, statuses and JSON
shapes, and `{"reason": ...}` bodies for bad requests."""

from __future__ import annotations

import http.client
import importlib.metadata
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import jwt

from tests.support.brokers import BrokerFactory, BrokerThread, token_auth
from tests.support.etcd import (
    EtcdServer,
    etcd,  # noqa: F401  (a fixture: a real etcd server)
)
from tests.support.http_calls import http_call
from tests.support.official import official_client
from tests.support.polling import eventually

SECRET = b"s" * 32
FULL_RANGE = "0x00000000_0xffffffff"


def _broker_id(broker: BrokerThread) -> str:
    """Pulsar's broker id: advertised host and web service port."""
    assert broker.server is not None
    return f"127.0.0.1:{broker.server.http_port}"


def _token(role: str) -> str:
    return jwt.encode({"sub": role}, SECRET, algorithm="HS256")


def _get_unfollowed(broker: BrokerThread, path: str, token: str) -> http.client.HTTPResponse:
    """A GET whose redirect is returned, not followed."""
    assert broker.server is not None
    connection = http.client.HTTPConnection("127.0.0.1", broker.server.http_port, timeout=10)
    connection.request("GET", path, headers={"Authorization": f"Bearer {token}"})
    response = connection.getresponse()
    response.read()
    connection.close()
    return response


def test_brokers_leader_and_version(broker: BrokerThread) -> None:
    """Standalone is its whole cluster: `brokers` and `brokers/{cluster}` list
    this broker's id (host:web port; without authorization Pulsar accepts any
    cluster name), the leader is this broker (BrokerInfo: serviceUrl and
    brokerId), and `version` is the bare version text, as Pulsar answers."""
    base = f"{broker.http_url}/admin/v2/brokers"
    me = _broker_id(broker)
    assert http_call("GET", base) == (200, [me])
    assert http_call("GET", f"{base}/standalone") == (200, [me])
    assert http_call("GET", f"{base}/elsewhere") == (200, [me])
    assert http_call("GET", f"{base}/leaderBroker") == (
        200,
        {"serviceUrl": f"http://{me}", "brokerId": me},
    )
    with urllib.request.urlopen(f"{base}/version", timeout=10) as response:
        assert response.status == 200
        assert response.read().decode() == importlib.metadata.version("magnetar")
    # The fixed paths beside {cluster} are still theirs.
    with urllib.request.urlopen(f"{base}/health", timeout=10) as response:
        assert response.read() == b"ok"
    status, body = http_call("POST", f"{base}/version")
    assert status == 405 and body["reason"]


def test_configuration_endpoints(broker: BrokerThread) -> None:
    """No setting is dynamic: the updatable names are [] and the overridden
    values {}; the runtime map has every setting as text (booleans spelled
    as Java does); the internal configuration names the metadata store."""
    base = f"{broker.http_url}/admin/v2/brokers"
    assert http_call("GET", f"{base}/configuration") == (200, [])
    assert http_call("GET", f"{base}/configuration/values") == (200, {})
    status, runtime = http_call("GET", f"{base}/configuration/runtime")
    assert status == 200
    assert all(isinstance(v, str) for v in runtime.values())
    assert runtime["cluster_name"] == "standalone"
    assert runtime["allow_auto_topic_creation"] == "true"
    assert runtime["data_dir"] == str(broker.config.data_dir)
    status, internal = http_call("GET", f"{base}/internal-configuration")
    assert status == 200
    url = internal["metadataStoreUrl"]
    assert url.startswith("sqlite://") and url.endswith("metadata.db")
    assert internal["configurationMetadataStoreUrl"] == url
    assert internal["bookkeeperMetadataServiceUri"] is None


def test_backlog_quota_check_runs_now(broker_factory: BrokerFactory) -> None:
    """`backlog-quota-check` runs the periodic check at once (Pulsar answers
    204): a consumer_backlog_eviction quota trims a slow subscription that
    the hourly check would not have reached yet."""
    broker = broker_factory(backlog_quota_check_interval_seconds=3600)
    ns = f"quota-{uuid.uuid4().hex[:6]}"
    ns_url = f"{broker.http_url}/admin/v2/namespaces/public/{ns}"
    assert http_call("PUT", ns_url) == (204, None)
    quota = {"limitSize": 1000, "limitTime": -1, "policy": "consumer_backlog_eviction"}
    assert http_call("POST", f"{ns_url}/backlogQuota", quota) == (204, None)
    topic = f"persistent://public/{ns}/t"
    with official_client(broker.url) as client:
        client.subscribe(topic, "slow").close()
        producer = client.create_producer(topic, batching_enabled=False)
        for _ in range(20):
            producer.send(b"x" * 200)
        producer.close()
    stats_url = f"{broker.http_url}/admin/v2/persistent/public/{ns}/t/stats"

    def backlog() -> int:
        return int(http_call("GET", stats_url)[1]["subscriptions"]["slow"]["msgBacklog"])

    assert backlog() == 20
    url = f"{broker.http_url}/admin/v2/brokers/backlog-quota-check"
    assert http_call("GET", url) == (204, None)
    assert 0 < backlog() < 20


def test_broker_stats_topics(broker: BrokerThread) -> None:
    """broker-stats/topics: namespace -> bundle -> domain -> topic -> the
    topic's streamed stats (Pulsar's msgInCount, producerCount, subscriptions
    with backlog; storage fields for a persistent topic only)."""
    name = f"bs-{uuid.uuid4().hex[:8]}"
    persistent = f"persistent://public/default/{name}"
    live = f"non-persistent://public/default/{name}"
    url = f"{broker.http_url}/admin/v2/broker-stats/topics"
    with official_client(broker.url) as client:
        client.subscribe(persistent, "sub").close()
        producer = client.create_producer(persistent, batching_enabled=False)
        for i in range(3):
            producer.send(f"m{i}".encode())
        live_consumer = client.subscribe(live, "watch")
        live_producer = client.create_producer(live, batching_enabled=False)
        live_producer.send(b"now")
        assert live_consumer.receive(timeout_millis=10_000).data() == b"now"
        status, body = http_call("GET", url)
        assert status == 200
        domains = body["public/default"][FULL_RANGE]
        stored = domains["persistent"][persistent]
        assert stored["msgInCount"] == 3 and stored["producerCount"] == 1
        assert stored["subscriptions"]["sub"]["msgBacklog"] == 3
        assert stored["storageSize"] > 0 and stored["replication"] == {}
        assert [p["producerName"] for p in stored["publishers"]] == [producer.producer_name()]
        gone = domains["non-persistent"][live]
        assert gone["msgInCount"] == 1 and gone["msgOutCount"] == 1
        assert [c["consumerName"] for c in gone["subscriptions"]["watch"]["consumers"]] == [
            live_consumer.consumer_name()
        ]
        assert "storageSize" not in gone


def test_broker_stats_metrics(broker: BrokerThread) -> None:
    """broker-stats/metrics: a list of Metrics ({"metrics", "dimensions"}),
    one per namespace with Pulsar's brk_* names, and the connection counts
    (dimension metric=broker_connection)."""
    topic = f"persistent://public/default/bm-{uuid.uuid4().hex[:8]}"
    url = f"{broker.http_url}/admin/v2/broker-stats/metrics"
    with official_client(broker.url) as client:
        client.subscribe(topic, "sub").close()
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(b"one")
        status, body = http_call("GET", url)
        assert status == 200
        assert all(set(m) == {"metrics", "dimensions"} for m in body)
        by_namespace = {m["dimensions"].get("namespace"): m["metrics"] for m in body}
        ns = by_namespace["public/default"]
        assert ns["brk_no_of_producers"] == 1 and ns["brk_msg_backlog"] == 1
        assert ns["brk_no_of_subscriptions"] == 1 and ns["brk_storage_size"] > 0
        (connections,) = [m for m in body if m["dimensions"].get("metric") == "broker_connection"]
        assert connections["dimensions"]["cluster"] == "standalone"
        assert connections["metrics"]["brk_active_connections"] >= 1
        assert connections["metrics"]["brk_connection_created_total_count"] >= 1


def test_owned_namespaces(broker: BrokerThread) -> None:
    """ownedNamespaces: each namespace with loaded topics, as its one bundle,
    with Pulsar's NamespaceOwnershipStatus; the id may carry http:// (as
    Pulsar accepts for compatibility); another broker's id is 404."""
    me = _broker_id(broker)
    base = f"{broker.http_url}/admin/v2/brokers/standalone"
    ns = f"own-{uuid.uuid4().hex[:6]}"
    assert http_call("PUT", f"{broker.http_url}/admin/v2/namespaces/public/{ns}") == (204, None)
    assert http_call("PUT", f"{broker.http_url}/admin/v2/persistent/public/{ns}/t") == (204, None)
    status, owned = http_call("GET", f"{base}/{me}/ownedNamespaces")
    assert status == 200
    assert owned[f"public/{ns}/{FULL_RANGE}"] == {
        "broker_assignment": "shared",
        "is_controlled": False,
        "is_active": True,
    }
    assert http_call("GET", f"{base}/http:%2F%2F{me}/ownedNamespaces")[0] == 200
    status, body = http_call("GET", f"{base}/10.9.9.9:8080/ownedNamespaces")
    assert status == 404 and "not found in available brokers" in body["reason"]


def test_superuser_only_and_other_clusters(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    """With authorization on: the brokers endpoints take a superuser (401
    otherwise, Magnetar's refusal status); the runtime configuration leaves
    out secrets; another cluster's brokers are a 307 to its web service (a
    GET is redirected, as Pulsar's cluster ownership check does) and an
    unknown cluster is 404 "Cluster does not exist"."""
    broker = broker_factory(
        **token_auth(tmp_path, SECRET, authorization_enabled=True, superuser_roles="root")
    )
    root, alice = _token("root"), _token("alice")
    base = f"{broker.http_url}/admin/v2/brokers"
    status, runtime = http_call("GET", f"{base}/configuration/runtime", token=root)
    assert status == 200 and runtime["authorization_enabled"] == "true"
    assert not {"token_secret_key", "token_public_key", "basic_auth_htpasswd"} & set(runtime)
    assert http_call("GET", f"{base}/configuration/runtime", token=alice)[0] == 401
    assert (
        http_call("GET", f"{broker.http_url}/admin/v2/broker-stats/topics", token=alice)[0] == 401
    )
    assert http_call("GET", f"{base}/standalone", token=root) == (200, [_broker_id(broker)])
    status, body = http_call("GET", f"{base}/nowhere", token=root)
    assert status == 404 and body == {"reason": "Cluster does not exist: cluster=nowhere"}
    other = {"serviceUrl": "http://127.0.0.1:1", "brokerServiceUrl": "pulsar://127.0.0.1:2"}
    assert http_call("PUT", f"{broker.http_url}/admin/v2/clusters/other", other, token=root) == (
        204,
        None,
    )
    response = _get_unfollowed(broker, "/admin/v2/brokers/other?x=1", root)
    assert response.status == 307
    assert response.headers["Location"] == "http://127.0.0.1:1/admin/v2/brokers/other?x=1"


def test_closed_connections_are_counted(broker: BrokerThread) -> None:
    """brk_connection_closed_total_count: connections opened and since closed."""
    url = f"{broker.http_url}/admin/v2/broker-stats/metrics"

    def connections() -> dict[str, Any]:
        body = http_call("GET", url)[1]
        (found,) = [m for m in body if m["dimensions"].get("metric") == "broker_connection"]
        metrics: dict[str, Any] = found["metrics"]
        return metrics

    with official_client(broker.url) as client:
        client.create_producer(f"persistent://public/default/c-{uuid.uuid4().hex[:6]}").close()
    eventually("the connection closed", lambda: connections()["brk_active_connections"] == 0)
    counted = connections()
    assert (
        counted["brk_connection_closed_total_count"]
        == counted["brk_connection_created_total_count"]
    )
    assert counted["brk_connection_created_total_count"] >= 1


def test_cluster_mode_keeps_its_own_routes(
    broker_factory: BrokerFactory,
    etcd: EtcdServer,  # noqa: F811
) -> None:
    """A cluster broker keeps the cluster's `brokers/{cluster}` (its live
    brokers, registered in etcd) and `broker-stats/ownership`; the per-broker
    endpoints are served there too, with the namespace bundles of the cluster
    in broker-stats/topics and etcd as the metadata store."""
    broker = broker_factory(metadata_url=etcd.url, cluster_lease_seconds=2)
    base = f"{broker.http_url}/admin/v2"
    registered = f"127.0.0.1:{broker.port}"  # the cluster's id: the binary address
    eventually(
        "the broker registered",
        lambda: http_call("GET", f"{base}/brokers/standalone")[1] == [registered],
    )
    assert http_call("GET", f"{base}/broker-stats/ownership")[0] == 200
    status, internal = http_call("GET", f"{base}/brokers/internal-configuration")
    assert status == 200 and internal["metadataStoreUrl"] == etcd.url
    topic = f"persistent://public/default/cl-{uuid.uuid4().hex[:8]}"
    with official_client(broker.url) as client:
        client.create_producer(topic).close()
    status, body = http_call("GET", f"{base}/broker-stats/topics")
    assert status == 200
    (bundle,) = body["public/default"]
    assert bundle != FULL_RANGE and topic in body["public/default"][bundle]["persistent"]
