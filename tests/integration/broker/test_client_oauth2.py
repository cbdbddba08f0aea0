"""OAuth2 client credentials through our client (issue 26, item 1): a token
endpoint of the test's own on loopback (issuer metadata plus the
client-credentials grant) issues short-lived JWTs the secured broker's
token provider checks. The client discovers the endpoint, sends its
credentials, connects with the token, and fetches a new one when the broker
challenges the expiring one."""

from __future__ import annotations

import base64
import json
import threading
import time
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import structlog

import magnetar.client as pulsar
from tests.integration.broker.test_broker_security import (
    _token,
    _topic,
    ca,  # noqa: F401 (fixture)
    secured,  # noqa: F401 (fixture)
)
from tests.support.brokers import BrokerThread
from tests.support.polling import eventually

CLIENT_ID, CLIENT_SECRET = "app-1", "s3cret"


class TokenEndpoint:
    """Issuer metadata at /.well-known/openid-configuration, the grant at
    /oauth/token; every grant asked for is recorded."""

    def __init__(self, role: str, lifetime_s: int) -> None:
        self.grants: list[dict[str, str]] = []
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path != "/.well-known/openid-configuration":
                    self._answer(404, {})
                    return
                self._answer(
                    200, {"issuer": endpoint.url, "token_endpoint": f"{endpoint.url}/oauth/token"}
                )

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                form = dict(urllib.parse.parse_qsl(self.rfile.read(length).decode()))
                endpoint.grants.append(form)
                if form.get("client_id") != CLIENT_ID or form.get("client_secret") != CLIENT_SECRET:
                    self._answer(401, {"error": "invalid_client"})
                    return
                now = time.time()
                expires = int(now) + lifetime_s
                # expires_in agrees with the JWT's whole-second exp.
                lifetime = int(expires - now)
                token = _token(role, exp=expires)
                self._answer(
                    200, {"access_token": token, "token_type": "Bearer", "expires_in": lifetime}
                )

            def _answer(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


@pytest.fixture
def endpoint() -> Iterator[TokenEndpoint]:
    server = TokenEndpoint("alice", lifetime_s=2)
    yield server
    server.close()


def _params(endpoint: TokenEndpoint, private_key: str) -> str:
    return json.dumps(
        {"issuer_url": endpoint.url, "private_key": private_key, "audience": "magnetar-test"}
    )


def test_oauth2_client_credentials_connect_and_refresh(
    secured: BrokerThread,  # noqa: F811
    endpoint: TokenEndpoint,
    tmp_path: Path,
) -> None:
    """The credentials file's client_id and client_secret and the audience
    reach the token endpoint; the token it issues opens the connection; when
    the 2-second token expires the broker's challenge is answered with a new
    grant and the same producer goes on publishing."""
    credentials = tmp_path / "credentials.json"
    credentials.write_text(json.dumps({"client_id": CLIENT_ID, "client_secret": CLIENT_SECRET}))
    auth = pulsar.AuthenticationOauth2(_params(endpoint, f"file://{credentials}"))
    topic = _topic()
    with (
        structlog.testing.capture_logs() as logs,
        pulsar.Client(secured.url, authentication=auth) as client,
    ):
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic)
        producer.send(b"before")
        eventually("a second grant", lambda: len(endpoint.grants) >= 2)
        producer.send(b"after")
        got = [consumer.receive(timeout_millis=5000).data() for _ in range(2)]
    assert got == [b"before", b"after"]
    first = endpoint.grants[0]
    assert first["grant_type"] == "client_credentials"
    assert first["audience"] == "magnetar-test"
    events = [e["event"] for e in logs]
    assert "credentials expired: closing" not in events
    assert events.count("producer created") == 1


def test_oauth2_credentials_inline_and_refused(
    secured: BrokerThread,  # noqa: F811
    endpoint: TokenEndpoint,
) -> None:
    """Credentials given as a data: URL work; wrong ones are refused by the
    endpoint and the client reports an AuthenticationError; parameters
    without issuer_url are a ValueError."""
    good = base64.b64encode(
        json.dumps({"client_id": CLIENT_ID, "client_secret": CLIENT_SECRET}).encode()
    ).decode()
    auth = pulsar.AuthenticationOauth2(_params(endpoint, f"data:application/json;base64,{good}"))
    with pulsar.Client(secured.url, authentication=auth) as client:
        client.create_producer(_topic()).send(b"inline")
    bad = base64.b64encode(json.dumps({"client_id": CLIENT_ID, "client_secret": "no"}).encode())
    refused = pulsar.AuthenticationOauth2(
        _params(endpoint, f"data:application/json;base64,{bad.decode()}")
    )
    with (
        pulsar.Client(secured.url, authentication=refused, operation_timeout_seconds=3) as client,
        pytest.raises(pulsar.AuthenticationError),
    ):
        client.create_producer(_topic())
    with pytest.raises(ValueError):
        pulsar.AuthenticationOauth2(json.dumps({"private_key": "/x"}))
