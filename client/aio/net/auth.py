"""Client authentication, with the official client's classes and names.

An authentication object says what CONNECT carries (a method name and
bytes), what an HTTP lookup sends (headers), and, for TLS authentication,
which client certificate the TLS handshake presents. `auth_data()` is asked
again for every connection and for every AUTH_CHALLENGE, so a token
supplier's new token is picked up when the broker asks for it.

`Authentication(plugin, params)` takes the plugin names the official
clients accept (`tls`, `token`, `basic` and the Java class names); a name it
does not know fails every connection with AuthenticationError, as there.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path

from magnetar.client.aio.errors import AuthenticationError, InvalidConfiguration


class Authentication:
    """Authentication by plugin name and parameter string (`key:value,...`
    or a JSON object), as the official `pulsar.Authentication`."""

    method_name: str = "none"
    # The plugin form hands everything to the class the plugin names; the
    # subclasses override what they carry and keep these defaults otherwise.
    _delegate: Authentication | None = None
    _unknown_plugin = ""

    def __init__(self, dynamicLibPath: str, authParamsString: str = "") -> None:
        if not isinstance(dynamicLibPath, str) or not isinstance(authParamsString, str):
            raise ValueError("Authentication(plugin: str, params: str)")
        self._delegate = _by_plugin(dynamicLibPath, authParamsString)
        if self._delegate is None:
            self._unknown_plugin = dynamicLibPath
        else:
            self.method_name = self._delegate.method_name

    @property
    def plugin_found(self) -> bool:
        """False when built from a plugin name no method here answers to
        (the official client fails only when connecting; so do we)."""
        return not self._unknown_plugin

    async def prepare(self, renew: bool = False) -> None:
        """Make ``auth_data()`` ready (a method that fetches its credentials
        over the network does it here); awaited before every CONNECT, AUTH
        response and HTTP lookup. ``renew``: the broker challenged the
        credentials it has, so kept ones are not good enough."""
        if self._delegate is not None:
            await self._delegate.prepare(renew)

    def auth_data(self) -> bytes:
        """What CONNECT and AUTH_RESPONSE carry."""
        if self._unknown_plugin:
            raise AuthenticationError(f"unknown authentication plugin {self._unknown_plugin!r}")
        return self._delegate.auth_data() if self._delegate is not None else b""

    def http_headers(self) -> dict[str, str]:
        """Headers of an HTTP lookup."""
        return self._delegate.http_headers() if self._delegate is not None else {}

    @property
    def tls_certificate(self) -> tuple[str, str] | None:
        """(certificate file, private key file) the TLS handshake presents."""
        return self._delegate.tls_certificate if self._delegate is not None else None


class AuthenticationToken(Authentication):
    """A token (JWT), or a function returning the current one."""

    method_name = "token"

    def __init__(self, token: str | Callable[[], str]) -> None:
        if not (isinstance(token, str) or callable(token)):
            raise ValueError("token must be a string or a function returning one")
        self._token = token

    def token(self) -> str:
        if callable(self._token):
            try:
                value = self._token()
            except Exception as exc:  # the application's supplier: any failure
                raise AuthenticationError(str(exc) or type(exc).__name__) from exc
        else:
            value = self._token
        if not isinstance(value, str):
            raise AuthenticationError(f"the token supplier returned {type(value).__name__}")
        return value

    def auth_data(self) -> bytes:
        return self.token().encode()

    def http_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token()}"}


class AuthenticationBasic(Authentication):
    """HTTP-basic style user and password; `method` is the method name sent."""

    def __init__(
        self,
        username: str | None = None,
        password: str | None = None,
        method: str = "basic",
        auth_params_string: str | None = None,
    ) -> None:
        if auth_params_string is not None:
            try:
                params = json.loads(auth_params_string)
            except ValueError:
                # The official client raises RuntimeError here.
                raise RuntimeError(
                    f"invalid basic auth parameters: {auth_params_string!r}"
                ) from None
            if not isinstance(params, dict):
                raise RuntimeError("basic auth parameters must be a JSON object")
            username, password = params.get("username"), params.get("password")
            method = params.get("method", "basic")
        if not isinstance(username, str) or not isinstance(password, str):
            raise ValueError("AuthenticationBasic needs a username and a password")
        if not isinstance(method, str):
            raise ValueError("method must be a string")
        self.method_name = method
        self._credentials = f"{username}:{password}"

    def auth_data(self) -> bytes:
        return self._credentials.encode()

    def http_headers(self) -> dict[str, str]:
        encoded = base64.b64encode(self._credentials.encode()).decode()
        return {"Authorization": f"Basic {encoded}"}


class AuthenticationTLS(Authentication):
    """The client certificate presented in the TLS handshake is the identity
    (a `pulsar+ssl://` or `https://` service URL)."""

    method_name = "tls"

    def __init__(self, certificate_path: str, private_key_path: str) -> None:
        if not isinstance(certificate_path, str) or not isinstance(private_key_path, str):
            raise ValueError("AuthenticationTLS(certificate_path: str, private_key_path: str)")
        self._files = (certificate_path, private_key_path)

    @property
    def tls_certificate(self) -> tuple[str, str] | None:
        return self._files


def _params(text: str) -> dict[str, str]:
    """`k1:v1,k2:v2` or a JSON object."""
    text = text.strip()
    if text.startswith("{"):
        try:
            loaded = json.loads(text)
        except ValueError as exc:
            raise InvalidConfiguration(f"invalid authentication parameters: {exc}") from None
        return {str(k): str(v) for k, v in loaded.items()}
    pairs: dict[str, str] = {}
    for part in filter(None, text.split(",")):
        key, sep, value = part.partition(":")
        if sep:
            pairs[key.strip()] = value.strip()
    return pairs


def _token_of(params: str) -> str | Callable[[], str]:
    """`token:<jwt>`, `file:///path` (read at every connection) or the token."""
    if params.startswith("token:"):
        return params[len("token:") :]
    if params.startswith("file://"):
        path = Path(params[len("file://") :])
        return lambda: path.read_text().strip()
    return params


# Plugins defined in modules of their own (OAuth2), by lower-case name.
_PLUGINS: dict[str, Callable[[str], Authentication]] = {}


def register_plugin(names: tuple[str, ...], make: Callable[[str], Authentication]) -> None:
    for name in names:
        _PLUGINS[name] = make


def _by_plugin(plugin: str, params: str) -> Authentication | None:
    name = plugin.rsplit(".", 1)[-1].lower()
    if name in _PLUGINS:
        return _PLUGINS[name](params)
    if name in ("tls", "authenticationtls"):
        given = _params(params)
        return AuthenticationTLS(given.get("tlsCertFile", ""), given.get("tlsKeyFile", ""))
    if name in ("token", "authenticationtoken"):
        return AuthenticationToken(_token_of(params.strip()))
    if name in ("basic", "authenticationbasic"):
        return AuthenticationBasic(auth_params_string=params)
    return None
