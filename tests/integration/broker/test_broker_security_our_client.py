"""TLS and authentication through our client (issue 26, item 1), against
the same secured broker the official client's security tests use: server
TLS trusted and not, host-name validation (a certificate for another host
refused), mutual TLS with AuthenticationTLS, tokens (string, supplier,
refreshed on AUTH_CHALLENGE), basic, an HTTP service URL sending its
credentials, and the generic Authentication(plugin, params)."""

from __future__ import annotations

import time
from typing import Any

import pytest
import structlog

import magnetar.client as pulsar
from tests.integration.broker.test_broker_security import (
    _tls,
    _tls_url,
    _token,
    _topic,
    ca,  # noqa: F401 (fixture)
    secured,  # noqa: F401 (fixture)
)
from tests.support.brokers import BrokerFactory, BrokerThread
from tests.support.certs import CertAuthority
from tests.support.polling import eventually


def _round_trip(client: Any, topic: str | None = None) -> None:
    topic = topic or _topic()
    consumer = client.subscribe(topic, "s")
    client.create_producer(topic).send(b"secret")
    assert consumer.receive(timeout_millis=5000).data() == b"secret"


def _public_round_trip(client: Any) -> None:
    _round_trip(client, f"persistent://public/default/tls-{time.monotonic_ns()}")


def test_tls_trusted_untrusted_and_host_name_validation(
    broker_factory: BrokerFactory,
    ca: CertAuthority,  # noqa: F811
) -> None:
    """pulsar+ssl://: a client trusting the CA round-trips; one that does not
    is refused (ConnectError); with tls_validate_hostname a certificate for
    another host is refused while the chain alone would pass."""
    broker = broker_factory(**_tls(ca.issue("localhost", server=True)))
    url = _tls_url(broker).replace("127.0.0.1", "localhost")
    with pulsar.Client(url, tls_trust_certs_file_path=str(ca.pem.cert)) as client:
        _public_round_trip(client)
    with (
        pulsar.Client(url, operation_timeout_seconds=3) as strangers,
        pytest.raises((pulsar.ConnectError, pulsar.Timeout)),
    ):
        strangers.create_producer(f"persistent://public/default/x-{time.monotonic_ns()}")

    other = broker_factory(**_tls(ca.issue("other", server=True, hosts=("other.example",))))
    other_url = _tls_url(other).replace("127.0.0.1", "localhost")
    with pulsar.Client(other_url, tls_trust_certs_file_path=str(ca.pem.cert)) as lenient:
        _public_round_trip(lenient)  # the chain is trusted; the name is not checked
    with (
        pulsar.Client(
            other_url,
            tls_trust_certs_file_path=str(ca.pem.cert),
            tls_validate_hostname=True,
            operation_timeout_seconds=3,
        ) as strict,
        pytest.raises((pulsar.ConnectError, pulsar.Timeout)),
    ):
        strict.create_producer(f"persistent://public/default/x-{time.monotonic_ns()}")


def test_mutual_tls_authentication(secured: BrokerThread, ca: CertAuthority) -> None:  # noqa: F811
    """AuthenticationTLS: the client certificate is the role (alice may
    produce and consume); swapped certificate and key files fail with
    ConnectError, as in the official client."""
    alice = ca.issue("alice")
    with pulsar.Client(
        _tls_url(secured),
        tls_trust_certs_file_path=str(ca.pem.cert),
        authentication=pulsar.AuthenticationTLS(str(alice.cert), str(alice.key)),
    ) as client:
        _round_trip(client)
    with pulsar.Client(
        _tls_url(secured),
        tls_trust_certs_file_path=str(ca.pem.cert),
        authentication=pulsar.Authentication(
            "org.apache.pulsar.client.impl.auth.AuthenticationTls",
            f"tlsCertFile:{alice.cert},tlsKeyFile:{alice.key}",
        ),
    ) as generic:
        _round_trip(generic)
    with (
        pulsar.Client(
            _tls_url(secured),
            tls_trust_certs_file_path=str(ca.pem.cert),
            tls_certificate_file_path=str(alice.key),
            tls_private_key_file_path=str(alice.cert),
            authentication=pulsar.AuthenticationToken(_token("alice")),
        ) as swapped,
        pytest.raises(pulsar.ConnectError),
    ):
        swapped.create_producer(_topic())


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
            with pulsar.Client(url, authentication=auth) as client:
                _round_trip(client)
    with (
        pulsar.Client(secured.url, authentication=pulsar.AuthenticationToken(_token("bob"))) as bob,
        pytest.raises(pulsar.AuthorizationError),
    ):
        bob.subscribe(_topic(), "nope")
    with (
        pulsar.Client(
            secured.http_url, authentication=pulsar.AuthenticationBasic("dave", "wrong")
        ) as wrong,
        pytest.raises(pulsar.ConnectError),
    ):
        wrong.create_producer(_topic())
    with (
        pulsar.Client(
            secured.url, authentication=pulsar.Authentication("someoldjunk.so", "x")
        ) as junk,
        pytest.raises(pulsar.AuthenticationError),
    ):
        junk.create_producer(_topic())
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
    with (
        structlog.testing.capture_logs() as logs,
        pulsar.Client(secured.url, authentication=pulsar.AuthenticationToken(fresh)) as client,
    ):
        producer = client.create_producer(topic)
        producer.send(b"before")
        eventually("a refresh", lambda: len(issued) >= 2)
        producer.send(b"after")
    events = [e["event"] for e in logs]
    assert "credentials expired: closing" not in events
    assert events.count("producer created") == 1
