"""TLS and authentication through our client (issue 26, item 1), against
the same secured broker the official client's security tests use: server
TLS trusted and not, host-name validation (a certificate for another host
refused), mutual TLS with AuthenticationTLS, tokens (string, supplier,
refreshed on AUTH_CHALLENGE), basic, an HTTP service URL sending its
credentials, and the generic Authentication(plugin, params)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import structlog

import magnetar.client as pulsar
from tests.integration.broker.harness import BrokerFactory, BrokerThread
from tests.integration.broker.test_broker_security import (
    _eventually,
    _tls,
    _tls_url,
    _token,
    _topic,
    ca,  # noqa: F401 (fixture)
    secured,  # noqa: F401 (fixture)
)
from tests.support.certs import CertAuthority


def _round_trip(client: Any, topic: str | None = None) -> None:
    topic = topic or _topic()
    consumer = client.subscribe(topic, "s")
    client.create_producer(topic).send(b"secret")
    assert consumer.receive(timeout_millis=5000).data() == b"secret"


def _public_round_trip(client: Any) -> None:
    _round_trip(client, f"persistent://public/default/tls-{time.monotonic_ns()}")


def test_tls_trusted_untrusted_and_host_name_validation(
    broker_factory: BrokerFactory,
    tmp_path: Path,
    ca: CertAuthority,  # noqa: F811
) -> None:
    """pulsar+ssl://: a client trusting the CA round-trips; one that does not
    is refused (ConnectError); with tls_validate_hostname a certificate for
    another host is refused while the chain alone would pass."""
    broker = broker_factory(**_tls(ca.issue("localhost", server=True)))
    url = _tls_url(broker).replace("127.0.0.1", "localhost")
    client = pulsar.Client(url, tls_trust_certs_file_path=str(ca.pem.cert))
    try:
        _public_round_trip(client)
    finally:
        client.close()
    strangers = pulsar.Client(url, operation_timeout_seconds=3)
    try:
        with pytest.raises((pulsar.ConnectError, pulsar.Timeout)):
            strangers.create_producer(f"persistent://public/default/x-{time.monotonic_ns()}")
    finally:
        strangers.close()

    other = broker_factory(**_tls(ca.issue("other", server=True, hosts=("other.example",))))
    other_url = _tls_url(other).replace("127.0.0.1", "localhost")
    lenient = pulsar.Client(other_url, tls_trust_certs_file_path=str(ca.pem.cert))
    try:
        _public_round_trip(lenient)  # the chain is trusted; the name is not checked
    finally:
        lenient.close()
    strict = pulsar.Client(
        other_url,
        tls_trust_certs_file_path=str(ca.pem.cert),
        tls_validate_hostname=True,
        operation_timeout_seconds=3,
    )
    try:
        with pytest.raises((pulsar.ConnectError, pulsar.Timeout)):
            strict.create_producer(f"persistent://public/default/x-{time.monotonic_ns()}")
    finally:
        strict.close()


def test_mutual_tls_authentication(secured: BrokerThread, ca: CertAuthority) -> None:  # noqa: F811
    """AuthenticationTLS: the client certificate is the role (alice may
    produce and consume); swapped certificate and key files fail with
    ConnectError, as in the official client."""
    alice = ca.issue("alice")
    client = pulsar.Client(
        _tls_url(secured),
        tls_trust_certs_file_path=str(ca.pem.cert),
        authentication=pulsar.AuthenticationTLS(str(alice.cert), str(alice.key)),
    )
    try:
        _round_trip(client)
    finally:
        client.close()
    generic = pulsar.Client(
        _tls_url(secured),
        tls_trust_certs_file_path=str(ca.pem.cert),
        authentication=pulsar.Authentication(
            "org.apache.pulsar.client.impl.auth.AuthenticationTls",
            f"tlsCertFile:{alice.cert},tlsKeyFile:{alice.key}",
        ),
    )
    try:
        _round_trip(generic)
    finally:
        generic.close()
    swapped = pulsar.Client(
        _tls_url(secured),
        tls_trust_certs_file_path=str(ca.pem.cert),
        tls_certificate_file_path=str(alice.key),
        tls_private_key_file_path=str(alice.cert),
        authentication=pulsar.AuthenticationToken(_token("alice")),
    )
    try:
        with pytest.raises(pulsar.ConnectError):
            swapped.create_producer(_topic())
    finally:
        swapped.close()


def test_tokens_basic_and_http_lookup(secured: BrokerThread) -> None:  # noqa: F811
    """Token and basic credentials in CONNECT, and as HTTP headers when the
    service URL is http:// (lookup over REST); a role without the grant is
    refused (AuthorizationError), wrong HTTP credentials are a ConnectError,
    an unknown plugin an AuthenticationError."""
    for auth in (
        pulsar.AuthenticationToken(_token("alice")),
        pulsar.AuthenticationToken(lambda: _token("alice")),
        pulsar.AuthenticationBasic("dave", "123456"),
        pulsar.AuthenticationBasic(
            auth_params_string='{"username": "carol", "password": "s3cret"}'
        ),
        pulsar.Authentication("token", f"token:{_token('alice')}"),
    ):
        for url in (secured.url, secured.http_url):
            client = pulsar.Client(url, authentication=auth)
            try:
                _round_trip(client)
            finally:
                client.close()
    bob = pulsar.Client(secured.url, authentication=pulsar.AuthenticationToken(_token("bob")))
    try:
        with pytest.raises(pulsar.AuthorizationError):
            bob.subscribe(_topic(), "nope")
    finally:
        bob.close()
    wrong = pulsar.Client(
        secured.http_url, authentication=pulsar.AuthenticationBasic("dave", "wrong")
    )
    try:
        with pytest.raises(pulsar.ConnectError):
            wrong.create_producer(_topic())
    finally:
        wrong.close()
    junk = pulsar.Client(secured.url, authentication=pulsar.Authentication("someoldjunk.so", "x"))
    try:
        with pytest.raises(pulsar.AuthenticationError):
            junk.create_producer(_topic())
    finally:
        junk.close()
    with pytest.raises(RuntimeError):
        pulsar.AuthenticationBasic(auth_params_string="invalid auth params")
    with pytest.raises(ValueError):
        pulsar.Client(secured.url, authentication="token")


def test_token_refreshed_on_auth_challenge(secured: BrokerThread) -> None:  # noqa: F811
    """A token that expires while connected: the broker's AUTH_CHALLENGE is
    answered with a fresh token from the supplier, and the same producer
    keeps publishing on the same connection."""
    issued: list[float] = []

    def fresh() -> str:
        issued.append(time.time())
        return _token("alice", exp=int(time.time()) + 2)

    topic = _topic()
    with structlog.testing.capture_logs() as logs:
        client = pulsar.Client(secured.url, authentication=pulsar.AuthenticationToken(fresh))
        try:
            producer = client.create_producer(topic)
            producer.send(b"before")
            _eventually("a refresh", lambda: len(issued) >= 2)
            producer.send(b"after")
        finally:
            client.close()
    events = [e["event"] for e in logs]
    assert "credentials expired: closing" not in events
    assert events.count("producer created") == 1
