"""Geo-replication administration (issue 45.1, 45.5): clusters, tenants'
allowed clusters, namespace and topic replication clusters with Pulsar's
refusals, the `magnetar admin` commands, and a remote with bad credentials."""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import jwt
import pulsar
import pytest

from tests.support.brokers import BrokerFactory, BrokerProcess, BrokerThread, token_auth
from tests.support.cli import magnetar
from tests.support.georep import admin, register
from tests.support.http_calls import http_call
from tests.support.official import official_client
from tests.support.polling import eventually

SECRET = b"georep-secret-georep-secret-0123"


def test_clusters_are_created_updated_listed_and_deleted(broker_factory: BrokerFactory) -> None:
    """Issue 45.1: /admin/v2/clusters/{cluster} keeps a remote's service URLs
    and authentication (create 204, again 409, update, get, list, delete);
    a URL of the wrong scheme is 412."""
    a = broker_factory(cluster_name="a")
    base = f"{a.http_url}/admin/v2/clusters"
    data = {
        "serviceUrl": "http://b.example:8080",
        "serviceUrlTls": "https://b.example:8443",
        "brokerServiceUrl": "pulsar://b.example:6650",
        "brokerServiceUrlTls": "pulsar+ssl://b.example:6651",
        "authenticationPlugin": "org.apache.pulsar.client.impl.auth.AuthenticationToken",
        "authenticationParameters": "token:abc",
    }
    assert http_call("PUT", f"{base}/b", data) == (204, None)
    assert http_call("PUT", f"{base}/b", data)[0] == 409
    assert http_call("GET", f"{base}/b") == (200, data)
    assert sorted(http_call("GET", base)[1]) == ["a", "b"]
    changed = {**data, "brokerServiceUrl": "pulsar://b2.example:6650"}
    assert http_call("POST", f"{base}/b", changed) == (204, None)
    assert http_call("GET", f"{base}/b") == (200, changed)
    status, body = http_call("POST", f"{base}/b", {"brokerServiceUrl": "http://b.example"})
    assert status == 412 and "brokerServiceUrl" in body["reason"]
    assert http_call("DELETE", f"{base}/b") == (204, None)
    assert http_call("GET", f"{base}/b")[0] == 404


def test_replication_to_unknown_or_not_allowed_clusters_is_refused(
    broker_factory: BrokerFactory,
) -> None:
    """Issue 45.5: a namespace or topic replicating to a cluster that is not
    registered is refused with Pulsar's 403 "Invalid cluster id", to one the
    tenant may not use with its 403 "not in the list of allowed clusters";
    an empty list and "global" are 412; nothing is stored."""
    a = broker_factory(cluster_name="a")
    register(a, "c", a)  # registered, but tenant public allows only "a"
    admin(a, "PUT", "/admin/v2/namespaces/public/geo")
    for path in (
        "/admin/v2/namespaces/public/geo/replication",
        "/admin/v2/persistent/public/geo/t/replication",
    ):
        url = a.http_url + path
        assert http_call("POST", url, ["a", "nowhere"]) == (
            403,
            {"reason": "Invalid cluster id: nowhere"},
        )
        assert http_call("POST", url, ["a", "c"]) == (
            403,
            {
                "reason": "Cluster [c] is not in the list of allowed clusters list "
                "for tenant [public]"
            },
        )
        assert http_call("POST", url, []) == (
            412,
            {"reason": "ClusterIds should not be null or empty"},
        )
        assert http_call("POST", url, ["global"])[0] == 412
        assert http_call("GET", url) == (200, [])
        assert http_call("POST", url, ["a"]) == (204, None)
        assert http_call("GET", url) == (200, ["a"])


def test_admin_cli_commands(broker_factory: BrokerFactory) -> None:
    """Issue 45.1: `magnetar admin clusters create/get/list/update/delete`
    (TLS options too),
    `tenants update`, `namespaces set-clusters/get-clusters` and `topics
    set/get/remove-replication-clusters`; a refusal exits 1 with the reason."""
    a = broker_factory(cluster_name="a")
    cli = ["admin", "--admin-url", a.http_url]

    def ok(*args: str) -> str:
        ran = magnetar(*cli, *args)
        assert ran.returncode == 0, (args, ran.stderr)
        return ran.stdout

    ok("clusters", "create", "b", "--url", "http://b:8080", "--broker-url", "pulsar://b:6650")
    assert ok("clusters", "list").split() == ["a", "b"]
    ok("clusters", "update", "b", "--url", "http://b:8081", "--broker-url", "pulsar://b:6651")
    assert "pulsar://b:6651" in ok("--json", "clusters", "get", "b")
    ran = magnetar(*cli, "namespaces", "set-clusters", "public/default", "-c", "a,b")
    assert ran.returncode == 1 and "not in the list of allowed clusters" in ran.stderr
    ok("tenants", "update", "public", "-c", "a,b")
    ok("namespaces", "set-clusters", "public/default", "-c", "a,b")
    assert ok("namespaces", "get-clusters", "public/default").split() == ["a", "b"]
    ok("topics", "set-replication-clusters", "t", "-c", "a")
    assert ok("topics", "get-replication-clusters", "t").split() == ["a"]
    ok("topics", "remove-replication-clusters", "t")
    assert ok("topics", "get-replication-clusters", "t", "--applied").split() == ["a", "b"]
    ok("namespaces", "remove-policy", "public/default", "replication")
    ok("tenants", "update", "public", "-c", "a")
    ok(
        "clusters", "update", "b", "--broker-url-secure", "pulsar+ssl://b:6651",
        "--tls-enable", "--tls-trust-certs-filepath", "/etc/ca.pem",
    )  # fmt: skip
    assert json.loads(ok("--json", "clusters", "get", "b")) == {
        "brokerServiceUrlTls": "pulsar+ssl://b:6651",
        "brokerClientTlsEnabled": True,
        "brokerClientTrustCertsFilePath": "/etc/ca.pem",
    }
    ok("clusters", "delete", "b")
    assert ok("clusters", "list").split() == ["a"]


@pytest.fixture
def source(tmp_path: Path) -> Iterator[BrokerProcess]:
    """Cluster "a" in a subprocess: its log is a file the test reads."""
    broker = BrokerProcess(tmp_path / "data-a", tmp_path / "a.log", cluster_name="a")
    broker.start()
    yield broker
    broker.stop()


def _errors(broker: BrokerProcess) -> float:
    """The replicators' failed attempts to reach cluster b (the metric)."""
    with urllib.request.urlopen(broker.http_url + "/metrics", timeout=10) as answer:
        text = answer.read().decode()
    found = re.search(r'magnetar_replication_errors_total\{remote_cluster="b"\} (\S+)', text)
    return float(found.group(1)) if found else 0.0


def test_bad_credentials_log_once_and_retry(
    broker_factory: BrokerFactory, source: BrokerProcess, tmp_path: Path
) -> None:
    """Issue 45.5: a remote that refuses the replicator's token is retried;
    the outage is logged once however many attempts fail, and once the
    cluster data has a good token the backlog arrives (and the log says so)."""
    b: BrokerThread = broker_factory(cluster_name="b", **token_auth(tmp_path, SECRET))
    good = jwt.encode({"sub": "replicator"}, SECRET, algorithm="HS256")
    plugin = "org.apache.pulsar.client.impl.auth.AuthenticationToken"
    register(source, "b", b, authenticationPlugin=plugin, authenticationParameters="token:bad")
    admin(source, "POST", "/admin/v2/tenants/public", {"allowedClusters": ["a", "b"]})
    admin(source, "PUT", "/admin/v2/namespaces/public/geo")
    admin(source, "POST", "/admin/v2/namespaces/public/geo/replication", ["a", "b"])
    assert http_call("PUT", f"{b.http_url}/admin/v2/namespaces/public/geo", token=good)[0] == 204
    topic = "persistent://public/geo/guarded"
    with official_client(source.url) as client:
        client.create_producer(topic).send(b"waiting")
    eventually("three failed attempts", lambda: _errors(source) >= 3)
    log = source.log_path.read_text()
    assert log.count("replication to the remote cluster failed") == 1
    assert "Unable to authenticate" in log
    register(source, "b", b, authenticationPlugin=plugin, authenticationParameters="token:" + good)
    with official_client(b.url, authentication=pulsar.AuthenticationToken(good)) as client:
        consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        assert consumer.receive(timeout_millis=30000).data() == b"waiting"
    eventually(
        "the log says replication resumed",
        lambda: "replication to the remote cluster resumed" in source.log_path.read_text(),
    )
