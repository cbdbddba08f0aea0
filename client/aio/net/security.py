"""What a client's connections need to be secure: TLS and authentication.

One `Security` per client, shared by its binary connections and its HTTP
lookups. The TLS context is built on first use, so a bad certificate or key
file fails the first connection with ConnectError (as the official client
does), not the constructor.
"""

from __future__ import annotations

import ssl

from magnetar.client.aio.errors import ConnectError
from magnetar.client.aio.net.auth import Authentication


class Security:
    def __init__(
        self,
        *,
        use_tls: bool = False,
        trust_certs_file: str | None = None,
        allow_insecure: bool = False,
        validate_hostname: bool = False,
        certificate_file: str | None = None,
        private_key_file: str | None = None,
        authentication: Authentication | None = None,
    ) -> None:
        self.use_tls = use_tls
        self.trust_certs_file = trust_certs_file or None
        self.allow_insecure = allow_insecure
        self.validate_hostname = validate_hostname
        # TLS authentication's certificate wins over the client's own.
        given = authentication.tls_certificate if authentication is not None else None
        self.certificate_file = given[0] if given else (certificate_file or None)
        self.private_key_file = given[1] if given else (private_key_file or None)
        self.authentication = authentication
        self._context: ssl.SSLContext | None = None

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context of every connection, or None without TLS."""
        if not self.use_tls:
            return None
        if self._context is None:
            self._context = self._build()
        return self._context

    def _build(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
        try:
            if self.trust_certs_file:
                context.load_verify_locations(cafile=self.trust_certs_file)
            if self.certificate_file and self.private_key_file:
                context.load_cert_chain(self.certificate_file, self.private_key_file)
        except (OSError, ssl.SSLError) as exc:
            raise ConnectError(f"TLS set-up failed: {exc}", retriable=False) from exc
        # The official client checks the chain by default and the host name
        # only when asked; "allow insecure" checks neither.
        context.check_hostname = self.validate_hostname and not self.allow_insecure
        if self.allow_insecure:
            context.verify_mode = ssl.CERT_NONE
        return context

    async def prepare_auth(self, renew: bool = False) -> None:
        """Let the authentication fetch what it needs (OAuth2's token)."""
        if self.authentication is not None:
            await self.authentication.prepare(renew)

    def connect_auth(self) -> tuple[str, bytes]:
        """CONNECT's auth_method_name and auth_data ("" and b"": none)."""
        auth = self.authentication
        if auth is None:
            return "", b""
        return auth.method_name, auth.auth_data()

    def http_headers(self) -> dict[str, str]:
        return self.authentication.http_headers() if self.authentication is not None else {}


NO_SECURITY = Security()
