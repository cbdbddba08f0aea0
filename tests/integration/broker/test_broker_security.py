"""TLS, authentication and authorization with the official client (issue 15):
server-auth and mutual TLS, token (HS256, RS256, expired), basic (bcrypt and
apr1 htpasswd entries) and TLS-certificate authentication, produce / consume
allowed and denied per namespace, and the admin API refusing non-admins."""

from __future__ import annotations

import base64
import json
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import jwt
import pulsar
import pytest
import structlog
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from passlib.apache import HtpasswdFile

from magnetar.proto import pulsar_api_pb2 as pb
from tests.support.brokers import BrokerFactory, BrokerThread
from tests.support.certs import CertAuthority, Pem
from tests.support.http_calls import http_call
from tests.support.official import official_client
from tests.support.polling import eventually
from tests.support.raw_client import RawClient

SECRET = b"k" * 32
NS = "public/secured"


@pytest.fixture
def ca(tmp_path: Path) -> CertAuthority:
    return CertAuthority(tmp_path)


def _tls(server: Pem, ca: CertAuthority | None = None) -> dict[str, Any]:
    """Broker settings for TLS on ephemeral ports with `server`'s certificate
    (and client certificates checked against `ca`)."""
    settings: dict[str, Any] = {
        "tls_enabled": True,
        "tls_port": 0,
        "tls_http_port": 0,
        "tls_cert_file": str(server.cert),
        "tls_key_file": str(server.key),
    }
    if ca is not None:
        settings["tls_trust_certs_file"] = str(ca.pem.cert)
    return settings


def _tls_url(broker: BrokerThread) -> str:
    assert broker.server is not None
    return f"pulsar+ssl://127.0.0.1:{broker.server.tls_port}"


def _token(role: str, **claims: Any) -> str:
    return jwt.encode({"sub": role, **claims}, SECRET, algorithm="HS256")


def _admin(broker: BrokerThread, method: str, path: str, body: object, role: str) -> int:
    """An admin call with a bearer token for `role`."""
    return http_call(method, f"{broker.http_url}/admin/v2/{path}", body, token=_token(role))[0]


@pytest.fixture
def secured(broker_factory: BrokerFactory, tmp_path: Path, ca: CertAuthority) -> BrokerThread:
    """TLS on, every provider on, authorization on, no anonymous role; the
    namespace public/secured grants alice produce + consume, bob produce."""
    secret = tmp_path / "secret.key"
    secret.write_bytes(base64.b64encode(SECRET))
    htpasswd = HtpasswdFile(str(tmp_path / ".htpasswd"), new=True, default_scheme="bcrypt")
    htpasswd.set_password("carol", "s3cret")
    htpasswd.save()
    with (tmp_path / ".htpasswd").open("a") as f:  # an apr1-MD5 entry, as htpasswd -m writes
        f.write("dave:$apr1$FG4AO6aX$KGYPuMoLUou3i6vUkPUUf.\n")  # password 123456
    server = ca.issue("localhost", server=True)
    broker = broker_factory(
        **_tls(server, ca),
        authentication_enabled=True,
        authentication_providers="token,basic,tls",
        token_secret_key=str(secret),
        basic_auth_htpasswd=str(tmp_path / ".htpasswd"),
        authorization_enabled=True,
        superuser_roles="root",
    )
    assert _admin(broker, "PUT", f"namespaces/{NS}", None, "root") == 204
    for role, actions in (
        ("alice", ["produce", "consume"]),
        ("bob", ["produce"]),
        ("carol", ["produce", "consume"]),
        ("dave", ["produce", "consume"]),
    ):
        assert _admin(broker, "POST", f"namespaces/{NS}/permissions/{role}", actions, "root") == 204
    return broker


def _topic() -> str:
    return f"persistent://{NS}/sec-{uuid.uuid4().hex[:8]}"


def _round_trip(client: Any) -> None:
    topic = _topic()
    consumer = client.subscribe(topic, "s")
    client.create_producer(topic).send(b"secret")
    assert consumer.receive(timeout_millis=5000).data() == b"secret"


def test_tls_server_auth_and_a_client_that_does_not_trust_it(
    broker_factory: BrokerFactory, ca: CertAuthority
) -> None:
    server = ca.issue("localhost", server=True)
    broker = broker_factory(
        **_tls(server),
    )
    with official_client(_tls_url(broker), tls_trust_certs_file_path=str(ca.pem.cert)) as client:
        _round_trip_public(client)
    # The admin port over HTTPS, verified against the same CA.
    assert broker.server is not None
    context = ssl.create_default_context(cafile=str(ca.pem.cert))
    url = f"https://localhost:{broker.server.tls_http_port}/admin/v2/clusters"
    with urllib.request.urlopen(url, context=context, timeout=10) as response:
        assert response.status == 200 and json.loads(response.read()) == ["standalone"]
    with (
        official_client(
            _tls_url(broker), tls_allow_insecure_connection=False, operation_timeout_seconds=3
        ) as client,
        pytest.raises(pulsar.PulsarException),
    ):
        client.create_producer(f"persistent://public/default/tls-{uuid.uuid4().hex[:6]}")


def _round_trip_public(client: Any) -> None:
    topic = f"persistent://public/default/tls-{uuid.uuid4().hex[:8]}"
    consumer = client.subscribe(topic, "s")
    client.create_producer(topic).send(b"over tls")
    assert consumer.receive(timeout_millis=5000).data() == b"over tls"


def test_mutual_tls_certificate_is_the_role(secured: BrokerThread, ca: CertAuthority) -> None:
    alice = ca.issue("alice")
    with official_client(
        _tls_url(secured),
        tls_trust_certs_file_path=str(ca.pem.cert),
        authentication=pulsar.AuthenticationTLS(str(alice.cert), str(alice.key)),
    ) as client:
        _round_trip(client)
    mallory = CertAuthority(ca.directory, "other-ca").issue("mallory")
    with (
        official_client(
            _tls_url(secured),
            tls_trust_certs_file_path=str(ca.pem.cert),
            authentication=pulsar.AuthenticationTLS(str(mallory.cert), str(mallory.key)),
            operation_timeout_seconds=3,
        ) as client,
        pytest.raises(pulsar.PulsarException),
    ):
        client.create_producer(_topic())  # a certificate the broker's CA did not sign


def _as(broker: BrokerThread, token: str | None, **options: Any) -> Any:
    auth = {} if token is None else {"authentication": pulsar.AuthenticationToken(token)}
    return official_client(broker.url, **auth, **options)


def test_tokens_hs256_expired_and_permissions(secured: BrokerThread) -> None:
    with _as(secured, _token("alice")) as c:
        _round_trip(c)
    # bob may produce, not consume.
    with _as(secured, _token("bob")) as c:
        topic = _topic()
        c.create_producer(topic).send(b"ok")
        with pytest.raises(pulsar.AuthorizationError):
            c.subscribe(topic, "nope")
    # A role without any permission on the namespace.
    with _as(secured, _token("eve")) as c, pytest.raises(pulsar.AuthorizationError):
        c.create_producer(_topic())
    expired = _token("alice", exp=int(time.time()) - 60)
    for token in (expired, None):  # expired, and no credentials with no anonymous role
        with (
            _as(secured, token, operation_timeout_seconds=3) as c,
            pytest.raises(pulsar.PulsarException),
        ):
            c.create_producer(_topic())


def test_rs256_token_with_a_public_key(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = tmp_path / "public.pem"
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    broker = broker_factory(
        authentication_enabled=True,
        authentication_providers="token",
        token_public_key=str(public),
    )
    token = jwt.encode({"sub": "anyone"}, key, algorithm="RS256")
    with official_client(broker.url, authentication=pulsar.AuthenticationToken(token)) as c:
        _round_trip_public(c)


def test_basic_auth_bcrypt_and_apr1(secured: BrokerThread) -> None:
    for user, password in (("carol", "s3cret"), ("dave", "123456")):
        with official_client(
            secured.url, authentication=pulsar.AuthenticationBasic(user, password)
        ) as c:
            _round_trip(c)
    with (
        official_client(
            secured.url,
            authentication=pulsar.AuthenticationBasic("carol", "wrong"),
            operation_timeout_seconds=3,
        ) as c,
        pytest.raises(pulsar.PulsarException),
    ):
        c.create_producer(_topic())


def test_admin_api_refuses_non_admins(secured: BrokerThread) -> None:
    """Pulsar answers an authenticated role without the permission with 401
    (its web resources' RestException(UNAUTHORIZED)), as a missing login."""
    assert _admin(secured, "PUT", "tenants/acme", {"adminRoles": ["alice"]}, "alice") == 401
    assert _admin(secured, "PUT", "tenants/acme", {"adminRoles": ["alice"]}, "root") == 204
    # alice administers her tenant now, and only it.
    assert _admin(secured, "PUT", "namespaces/acme/ns", None, "alice") == 204
    assert _admin(secured, "PUT", "namespaces/public/other", None, "alice") == 401
    status, body = http_call("GET", f"{secured.http_url}/admin/v2/tenants")
    assert status == 401 and "authentication" in body["reason"]
    # Metrics and health stay open for scrapers and load balancers.
    for path in ("/admin/v2/brokers/health", "/metrics"):
        with urllib.request.urlopen(f"{secured.http_url}{path}", timeout=10) as response:
            assert response.status == 200


def test_token_commands_make_keys_the_broker_accepts(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    key = tmp_path / "made.key"
    run = [sys.executable, "-m", "magnetar.broker", "token"]
    subprocess.run([*run, "create-secret-key", "--output", str(key)], check=True)
    token = subprocess.run(
        [*run, "create", "--subject", "svc", "--secret-key", str(key)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    broker = broker_factory(
        authentication_enabled=True, authentication_providers="token", token_secret_key=str(key)
    )
    with official_client(broker.url, authentication=pulsar.AuthenticationToken(token)) as c:
        _round_trip_public(c)


def test_expired_token_is_refreshed_through_auth_challenge(secured: BrokerThread) -> None:
    """A token that expires during the connection: the broker sends
    AUTH_CHALLENGE, the official client answers with a fresh token from its
    supplier, and the same producer keeps publishing; a client whose answer
    is the old, expired token is disconnected and cannot come back."""
    issued: list[float] = []

    def fresh() -> str:
        issued.append(time.time())
        return _token("alice", exp=int(time.time()) + 2)

    topic = _topic()
    with (
        structlog.testing.capture_logs() as logs,
        official_client(secured.url, authentication=pulsar.AuthenticationToken(fresh)) as c,
    ):
        producer = c.create_producer(topic)
        producer.send(b"before")
        # The first token expires: the challenge makes the client fetch another.
        eventually("a refresh", lambda: len(issued) >= 2)
        producer.send(b"after")
    events = [e["event"] for e in logs]
    # Refreshed in place: no connection was closed for it, none re-opened.
    assert "credentials expired: closing" not in events
    assert events.count("producer created") == 1
    stale = _token("alice", exp=int(time.time()) + 2)
    with _as(secured, stale, operation_timeout_seconds=3) as c:
        producer = c.create_producer(topic, send_timeout_millis=2000)
        # Without fresh credentials the broker closes the connection at expiry.
        eventually("the disconnect", lambda: not producer.is_connected())
        with pytest.raises(pulsar.PulsarException):
            producer.send(b"with an expired token")


def test_unknown_namespace_is_topic_not_found_even_under_authorization(
    secured: BrokerThread,
) -> None:
    with _as(secured, _token("alice")) as c, pytest.raises(pulsar.TopicNotFound):
        c.create_producer("persistent://nowhere/ns/topic")


def test_tls_minimum_version_and_a_required_client_certificate(
    broker_factory: BrokerFactory, ca: CertAuthority
) -> None:
    server = ca.issue("localhost", server=True)
    broker = broker_factory(
        **_tls(server, ca),
        tls_require_trusted_client_cert=True,
        tls_min_version="tlsv1.3",
    )
    assert broker.server is not None
    capped = ssl.create_default_context(cafile=str(ca.pem.cert))
    capped.maximum_version = ssl.TLSVersion.TLSv1_2
    with (
        socket.create_connection(("127.0.0.1", broker.server.tls_port), timeout=5) as sock,
        pytest.raises(ssl.SSLError),
    ):
        capped.wrap_socket(sock, server_hostname="localhost")
    with (
        official_client(
            _tls_url(broker),
            tls_trust_certs_file_path=str(ca.pem.cert),
            operation_timeout_seconds=3,
        ) as client,
        pytest.raises(pulsar.PulsarException),
    ):
        client.create_producer(f"persistent://public/default/tls-{uuid.uuid4().hex[:6]}")
    erin = ca.issue("erin")
    with official_client(
        _tls_url(broker),
        tls_trust_certs_file_path=str(ca.pem.cert),
        tls_certificate_file_path=str(erin.cert),
        tls_private_key_file_path=str(erin.key),
    ) as client:
        _round_trip_public(client)


def test_es256_token_from_the_magnetar_broker_script(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    private, public = tmp_path / "es.key", tmp_path / "es.pub"
    private.write_bytes(  # PKCS#8: the PEM label does not name the key type
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    script = Path(sys.executable).with_name("magnetar-broker")
    token = subprocess.run(
        [str(script), "token", "create", "--subject", "svc", "--private-key", str(private)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert jwt.get_unverified_header(token)["alg"] == "ES256"
    broker = broker_factory(
        authentication_enabled=True, authentication_providers="token", token_public_key=str(public)
    )
    with official_client(broker.url, authentication=pulsar.AuthenticationToken(token)) as c:
        _round_trip_public(c)


def test_a_revoked_permission_is_refused(secured: BrokerThread) -> None:
    topic = _topic()
    with _as(secured, _token("alice")) as client:
        client.create_producer(topic).send(b"before")
    assert _admin(secured, "DELETE", f"namespaces/{NS}/permissions/alice", None, "root") == 204
    with (
        _as(secured, _token("alice")) as client,
        pytest.raises(pulsar.AuthorizationError),
    ):
        client.create_producer(topic)


def test_get_schema_needs_a_grant_on_the_namespace(secured: BrokerThread) -> None:
    """Issue 28.4: GET_SCHEMA is authorized like a lookup: a role with a grant
    on the namespace reads the topic's schema, a role without one is refused
    with AuthorizationError and learns nothing of it."""
    topic = _topic()
    with _as(secured, _token("alice")) as client:
        client.create_producer(topic, schema=pulsar.schema.StringSchema()).send("typed")

    def get_schema(role: str) -> pb.CommandGetSchemaResponse:
        with RawClient.for_broker(secured) as raw:
            raw.connect(token=_token(role))
            raw.send(pb.CommandGetSchema(request_id=1, topic=topic))
            return raw.expect(pb.BaseCommand.GET_SCHEMA_RESPONSE).command.getSchemaResponse

    allowed = get_schema("bob")
    assert not allowed.HasField("error_code")
    assert allowed.schema.type == pb.Schema.String
    refused = get_schema("eve")
    assert refused.error_code == pb.ServerError.AuthorizationError
    assert not refused.HasField("schema")


def test_lookup_refusals_say_what_pulsar_says(secured: BrokerThread) -> None:
    """A role without a grant is refused LOOKUP and PARTITIONED_METADATA with
    AuthorizationError and Pulsar's own texts (the C++ client's suite,
    AuthPluginToken.testNoAuth, matches the partitioned-metadata one)."""
    topic = _topic()
    with RawClient.for_broker(secured) as raw:
        raw.connect(token=_token("eve"))
        raw.send(pb.CommandPartitionedTopicMetadata(topic=topic, request_id=1))
        meta = raw.expect(pb.BaseCommand.PARTITIONED_METADATA_RESPONSE).command
        refused = meta.partitionMetadataResponse
        assert refused.error == pb.ServerError.AuthorizationError
        assert refused.message == "Client is not authorized to Get Partition Metadata"
        raw.send(pb.CommandLookupTopic(topic=topic, request_id=2))
        lookup = raw.expect(pb.BaseCommand.LOOKUP_RESPONSE).command.lookupTopicResponse
        assert lookup.error == pb.ServerError.AuthorizationError
        assert lookup.message == "Client is not authorized to Perform Lookup"


def test_http_schema_read_needs_a_grant(secured: BrokerThread) -> None:
    """GET of a topic's schema over HTTP (what the official client does when
    its service URL is http://) is a topic operation like a lookup: a role
    with a grant reads it, one without is refused with 401, as Pulsar answers
    (the C++ suite's LookupServiceTest.testGetSchema over HTTP)."""
    topic = _topic()
    with _as(secured, _token("alice")) as client:
        client.create_producer(topic, schema=pulsar.schema.StringSchema()).send("typed")
    path = "schemas/" + topic.split("://", 1)[1] + "/schema"
    status, body = http_call("GET", f"{secured.http_url}/admin/v2/{path}", token=_token("bob"))
    assert status == 200 and body["type"] == "STRING"
    assert _admin(secured, "GET", path, None, "eve") == 401
    assert _admin(secured, "DELETE", path, None, "bob") == 401  # not a tenant admin
