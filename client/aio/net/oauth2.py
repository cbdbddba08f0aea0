"""OAuth 2.0 client-credentials authentication (`AuthenticationOauth2`).

The parameters are the official client's JSON: ``issuer_url`` and
``private_key`` (required: a credentials file holding ``client_id`` and
``client_secret``, given as a path, a ``file:`` URL or a
``data:application/json;base64,`` URL), ``audience`` and ``scope``. The token
endpoint is found in the issuer's ``/.well-known/openid-configuration``; a
token is asked for with the client-credentials grant, kept, and asked for
again shortly before it expires. The broker sees an ordinary token
(method ``token``), so its token provider checks it.

Fetching needs I/O, so the connection and the HTTP lookup await
:meth:`AuthenticationOauth2.prepare` before they read ``auth_data()``.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import aiohttp

from magnetar.client.aio.errors import AuthenticationError
from magnetar.client.aio.net.auth import Authentication, register_plugin

# A token is renewed when less than this share of its lifetime is left
# (at most RENEW_MARGIN_MAX_S before it expires).
RENEW_SHARE = 0.1
RENEW_MARGIN_MAX_S = 60.0
HTTP_TIMEOUT_S = 30.0


class AuthenticationOauth2(Authentication):
    """Client-credentials flow against ``issuer_url``; see the module doc."""

    method_name = "token"

    def __init__(
        self, auth_params_string: str, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if not isinstance(auth_params_string, str):
            raise ValueError("auth_params_string must be a JSON string")
        try:
            params = json.loads(auth_params_string)
        except ValueError as exc:
            raise ValueError(f"invalid OAuth2 parameters: {exc}") from None
        if not isinstance(params, dict):
            raise ValueError("OAuth2 parameters must be a JSON object")
        issuer, key = params.get("issuer_url"), params.get("private_key")
        if not isinstance(issuer, str) or not issuer:
            raise ValueError("OAuth2 parameters need issuer_url")
        if not isinstance(key, str) or not key:
            raise ValueError("OAuth2 parameters need private_key (the credentials file)")
        self._issuer = issuer.rstrip("/")
        self._key = key
        self._audience = _optional(params, "audience")
        self._scope = _optional(params, "scope")
        self._clock = clock
        self._token: str | None = None
        self._renew_at = 0.0
        self._token_endpoint: str | None = None

    async def prepare(self, renew: bool = False) -> None:
        """Fetch a token unless the one kept is still fresh (and not challenged)."""
        if not renew and self._token is not None and self._clock() < self._renew_at:
            return
        credentials = _read_credentials(self._key)
        async with aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=HTTP_TIMEOUT_S)
        ) as session:
            if self._token_endpoint is None:
                self._token_endpoint = await self._discover(session)
            form = {"grant_type": "client_credentials", **credentials}
            if self._audience:
                form["audience"] = self._audience
            if self._scope:
                form["scope"] = self._scope
            asked = self._clock()
            answer = await _json(session.post(self._token_endpoint, data=form), "token endpoint")
        token = answer.get("access_token")
        if not isinstance(token, str) or not token:
            raise AuthenticationError("the token endpoint's answer has no access_token")
        lifetime = answer.get("expires_in")
        if isinstance(lifetime, int | float) and lifetime > 0:
            margin = min(lifetime * RENEW_SHARE, RENEW_MARGIN_MAX_S)
            self._renew_at = asked + lifetime - margin
        else:
            self._renew_at = float("inf")
        self._token = token

    async def _discover(self, session: aiohttp.ClientSession) -> str:
        url = f"{self._issuer}/.well-known/openid-configuration"
        metadata = await _json(session.get(url), "issuer metadata")
        endpoint = metadata.get("token_endpoint")
        if not isinstance(endpoint, str) or not endpoint:
            raise AuthenticationError(f"{url} names no token_endpoint")
        return endpoint

    def token(self) -> str:
        if self._token is None:
            raise AuthenticationError("no OAuth2 token fetched yet")
        return self._token

    def auth_data(self) -> bytes:
        return self.token().encode()

    def http_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token()}"}


register_plugin(("oauth2", "authenticationoauth2"), AuthenticationOauth2)


def _optional(params: dict[str, Any], name: str) -> str | None:
    value = params.get(name)
    if value is not None and not isinstance(value, str):
        raise ValueError(f"OAuth2 parameter {name} must be a string")
    return value or None


def _read_credentials(key: str) -> dict[str, str]:
    """client_id and client_secret from the ``private_key`` location."""
    try:
        if key.startswith("data:"):
            header, _, body = key[len("data:") :].partition(",")
            raw = base64.b64decode(body) if header.endswith(";base64") else unquote(body).encode()
        else:
            path = unquote(urlsplit(key).path) if key.startswith("file:") else key
            raw = Path(path).read_bytes()
        loaded = json.loads(raw)
    except (OSError, ValueError) as exc:
        raise AuthenticationError(f"cannot read OAuth2 credentials {key!r}: {exc}") from None
    client_id = loaded.get("client_id") if isinstance(loaded, dict) else None
    secret = loaded.get("client_secret") if isinstance(loaded, dict) else None
    if not isinstance(client_id, str) or not isinstance(secret, str):
        raise AuthenticationError("OAuth2 credentials need client_id and client_secret")
    return {"client_id": client_id, "client_secret": secret}


async def _json(request: Any, what: str) -> dict[str, Any]:
    """The JSON object a request answers; AuthenticationError otherwise."""
    try:
        async with request as response:
            text = await response.text()
            if response.status != 200:
                raise AuthenticationError(f"{what} answered {response.status}: {text[:200]}")
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise AuthenticationError(f"{what} unreachable: {exc}") from exc
    try:
        loaded = json.loads(text)
    except ValueError:
        raise AuthenticationError(f"{what} answered something not JSON") from None
    if not isinstance(loaded, dict):
        raise AuthenticationError(f"{what} answered something not a JSON object")
    return loaded
