"""Geo-replication to a remote reached over TLS (issue 45.1, 45.2): the
cluster data's pulsar+ssl:// URL with Pulsar's brokerClientTlsEnabled and
brokerClientTrustCertsFilePath; a remote whose certificate is not trusted
is retried, not trusted."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

import pulsar

from tests.support.brokers import BrokerFactory, BrokerThread
from tests.support.certs import CertAuthority
from tests.support.georep import admin, register
from tests.support.official import official_client
from tests.support.polling import eventually


def _tls_url(broker: BrokerThread) -> str:
    assert broker.server is not None
    return f"pulsar+ssl://127.0.0.1:{broker.server.tls_port}"


def _errors(broker: BrokerThread) -> float:
    """The replicators' failed attempts to reach cluster b (the metric)."""
    with urllib.request.urlopen(broker.http_url + "/metrics", timeout=10) as answer:
        text = answer.read().decode()
    found = re.search(r'magnetar_replication_errors_total\{remote_cluster="b"\} (\S+)', text)
    return float(found.group(1)) if found else 0.0


def test_replication_over_tls(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    """Issue 45.2: with brokerClientTlsEnabled the replicator connects to the
    remote's brokerServiceUrlTls, checking its certificate against
    brokerClientTrustCertsFilePath; with a CA that did not sign it nothing
    is sent, and once the right CA is registered the message arrives."""
    ca = CertAuthority(tmp_path)
    other = CertAuthority(tmp_path, name="other-ca")
    server = ca.issue("b-broker", server=True)
    a = broker_factory(cluster_name="a")
    b = broker_factory(
        cluster_name="b",
        tls_enabled=True,
        tls_port=0,
        tls_http_port=0,
        tls_cert_file=str(server.cert),
        tls_key_file=str(server.key),
    )
    data = {"brokerClientTlsEnabled": True, "brokerServiceUrlTls": _tls_url(b)}
    register(a, "b", b, **data, brokerClientTrustCertsFilePath=str(other.pem.cert))
    admin(a, "POST", "/admin/v2/tenants/public", {"allowedClusters": ["a", "b"]})
    for broker in (a, b):
        admin(broker, "PUT", "/admin/v2/namespaces/public/geo")
    admin(a, "POST", "/admin/v2/namespaces/public/geo/replication", ["a", "b"])
    topic = "persistent://public/geo/over-tls"
    stats = "/admin/v2/persistent/public/geo/over-tls/stats"
    with official_client(a.url) as client:
        client.create_producer(topic).send(b"secret")

    eventually("two refused TLS handshakes", lambda: _errors(a) >= 2)
    section = admin(a, "GET", stats)["replication"]["b"]  # type: ignore[index]
    assert {k: section[k] for k in ("connected", "replicationBacklog", "msgOutCounter")} == {
        "connected": False,
        "replicationBacklog": 1,
        "msgOutCounter": 0,
    }
    register(a, "b", b, **data, brokerClientTrustCertsFilePath=str(ca.pem.cert))
    with official_client(b.url) as client:
        consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        assert consumer.receive(timeout_millis=30000).data() == b"secret"
