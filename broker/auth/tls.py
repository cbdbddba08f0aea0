"""Server-side TLS contexts for the binary and the HTTP listeners."""

from __future__ import annotations

import ssl
from typing import Any

from magnetar.broker.config import BrokerConfig

_VERSIONS = {"tlsv1.2": ssl.TLSVersion.TLSv1_2, "tlsv1.3": ssl.TLSVersion.TLSv1_3}


def server_context(config: BrokerConfig) -> ssl.SSLContext:
    """Certificate and key from the config; with a CA file, client
    certificates are verified when presented (required if so configured)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = _VERSIONS[config.tls_min_version]
    context.load_cert_chain(config.tls_cert_file, config.tls_key_file)
    if config.tls_ciphers:
        context.set_ciphers(config.tls_ciphers)
    if config.tls_trust_certs_file:
        context.load_verify_locations(config.tls_trust_certs_file)
        context.verify_mode = (
            ssl.CERT_REQUIRED if config.tls_require_trusted_client_cert else ssl.CERT_OPTIONAL
        )
    return context


def peer_common_name(ssl_object: Any) -> str | None:
    """The CN of the verified client certificate, if the client sent one."""
    if ssl_object is None:
        return None
    cert = ssl_object.getpeercert()
    if not cert:
        return None
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None
