"""Authentication providers (Pulsar's token, basic and tls) and the service
that picks one by the method a client names.

A client that names no method, or one that is not enabled, gets the
anonymous role when one is configured (as Pulsar does; authorization then
decides what it may do), otherwise it is refused. Credentials never reach a
log line; failures are logged by the caller with the remote address only.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from pathlib import Path

import jwt
from passlib.apache import HtpasswdFile

from magnetar.broker.config import BrokerConfig

# What a client is told when its credentials are refused: Pulsar's words,
# which clients match on; the reason goes to the broker's log only.
AUTHENTICATION_REFUSED = "Unable to authenticate"


class AuthenticationFailed(Exception):
    """Bad or missing credentials; the message never contains them."""


@dataclass(frozen=True, slots=True)
class Credentials:
    role: str
    method: str = ""
    # Epoch seconds after which the client must authenticate again (a
    # token's `exp`); None: never.
    expires_at: float | None = None


def _read_key(path: str) -> bytes:
    raw = Path(path.removeprefix("file://")).read_bytes().strip()
    return raw


def read_secret_key(path: str) -> bytes:
    """An HS256 secret from a file, raw or base64 (as `create-secret-key
    --base64` and Pulsar's tooling write it)."""
    # Raw keys are random bytes: whitespace at either end is part of the key.
    raw = Path(path.removeprefix("file://")).read_bytes()
    try:
        decoded = base64.b64decode(raw.strip(), validate=True)
    except binascii.Error:
        return raw
    return decoded if len(decoded) >= 32 else raw


class TokenProvider:
    """JWTs: HS256 with the secret key, RS256 / ES256 with the public key;
    the role is the `sub` claim; an expired token is refused."""

    method = "token"

    def __init__(self, secret_key: str, public_key: str) -> None:
        self._keys: list[tuple[bytes, list[str]]] = []
        if secret_key:
            self._keys.append((read_secret_key(secret_key), ["HS256"]))
        if public_key:
            self._keys.append((_read_key(public_key), ["RS256", "ES256"]))
        if not self._keys:
            raise ValueError("the token provider needs token_secret_key or token_public_key")

    def authenticate(self, data: bytes, peer_cn: str | None) -> Credentials:
        token = data.decode(errors="replace").removeprefix("Bearer ").strip()
        for key, algorithms in self._keys:
            try:
                claims = jwt.decode(token, key, algorithms=algorithms)
            except jwt.ExpiredSignatureError:
                raise AuthenticationFailed("the token has expired") from None
            except jwt.PyJWTError:
                continue
            subject = claims.get("sub")
            if not isinstance(subject, str) or not subject:
                raise AuthenticationFailed("the token has no subject")
            expiry = claims.get("exp")
            expires_at = float(expiry) if isinstance(expiry, int | float) else None
            return Credentials(subject, self.method, expires_at)
        raise AuthenticationFailed("the token is not valid")


class BasicProvider:
    """user:password checked against an htpasswd file (bcrypt, apr1-MD5)."""

    method = "basic"

    def __init__(self, htpasswd: str) -> None:
        if not htpasswd:
            raise ValueError("the basic provider needs basic_auth_htpasswd")
        self._users = HtpasswdFile(htpasswd)

    def authenticate(self, data: bytes, peer_cn: str | None) -> Credentials:
        user, sep, password = data.decode(errors="replace").partition(":")
        self._users.load_if_changed()
        if not sep or not self._users.check_password(user, password):
            raise AuthenticationFailed("unknown user or wrong password")
        return Credentials(user, self.method)


class TlsProvider:
    """The role is the common name of the client's verified certificate."""

    method = "tls"

    def authenticate(self, data: bytes, peer_cn: str | None) -> Credentials:
        if not peer_cn:
            raise AuthenticationFailed("no verified client certificate")
        return Credentials(peer_cn, self.method)


Provider = TokenProvider | BasicProvider | TlsProvider


class AuthenticationService:
    def __init__(self, config: BrokerConfig) -> None:
        self.anonymous_role = config.anonymous_user_role or None
        self.providers: dict[str, Provider] = {}
        for name in config.auth_providers():
            if name == "token":
                self.providers[name] = TokenProvider(
                    config.token_secret_key, config.token_public_key
                )
            elif name == "basic":
                self.providers[name] = BasicProvider(config.basic_auth_htpasswd)
            elif name == "tls":
                self.providers[name] = TlsProvider()

    def authenticate(self, method: str, data: bytes, peer_cn: str | None) -> Credentials:
        """Who CONNECT's (or AUTH_RESPONSE's) auth_method_name and auth_data name."""
        provider = self.providers.get(method)
        if provider is None:
            if self.anonymous_role is not None:
                return Credentials(self.anonymous_role)
            raise AuthenticationFailed(
                f"authentication method {method!r} is not enabled"
                if method
                else "authentication required"
            )
        return provider.authenticate(data, peer_cn)

    def authenticate_http(self, authorization: str | None, peer_cn: str | None) -> str:
        """The role for an HTTP request's Authorization header (or certificate)."""
        if authorization:
            scheme, _, value = authorization.partition(" ")
            scheme = scheme.lower()
            if scheme == "bearer":
                return self.authenticate("token", value.encode(), peer_cn).role
            if scheme == "basic":
                try:
                    decoded = base64.b64decode(value.strip(), validate=True)
                except binascii.Error:
                    raise AuthenticationFailed("malformed basic credentials") from None
                return self.authenticate("basic", decoded, peer_cn).role
        if peer_cn and "tls" in self.providers:
            return peer_cn
        return self.authenticate("", b"", peer_cn).role
