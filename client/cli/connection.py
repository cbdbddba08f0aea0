"""How the tools reach a broker: the service URL, authentication and TLS,
given as pulsar-admin and pulsar-client spell their options, or in a
client.conf-like file (`--config`, or MAGNETAR_CLIENT_CONF) with Pulsar's
keys. A command-line option (or its environment variable) wins over the
file, the file over the built-in default.

`connection_options("admin")` puts the options on `magnetar admin` (the URL
is `--admin-url`, the file's webServiceUrl); `connection_options("client")`
on produce and consume (`--url`, the file's brokerServiceUrl, else its
webServiceUrl, as pulsar-client reads it). Either hands the command one
`connection: Connection` argument instead of the separate options.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
import ssl
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NoReturn

import click
from click.core import ParameterSource

from magnetar import client as pulsar
from magnetar.client.aio.net.security import Security
from magnetar.client.cli.http import REFUSED, UNREACHABLE, Admin

Kind = Literal["admin", "client"]

# The URL option of each kind: (option, environment variable, default,
# the file's keys in the order they are looked at).
_URLS: dict[Kind, tuple[str, str, str, tuple[str, ...]]] = {
    "admin": (
        "--admin-url",
        "MAGNETAR_ADMIN_URL",
        "http://localhost:8080",
        ("webServiceUrl", "serviceUrl"),
    ),
    "client": (
        "--url",
        "MAGNETAR_SERVICE_URL",
        "pulsar://localhost:6650",
        ("brokerServiceUrl", "webServiceUrl"),
    ),
}
BAD_USAGE = 2


# A key ends at whitespace, `=` or `:`; one `=` or `:` may follow.
_PROPERTY = re.compile(r"(?P<key>[^=:\s]+)\s*[=:]?\s*(?P<value>.*)")


def read_client_conf(path: str) -> dict[str, str]:
    """A Java properties file as Pulsar's client.conf is written: `key=value`
    (or `key: value`, `key value`) lines, `#` and `!` comments, a trailing
    backslash continuing a line. Other escapes are not interpreted."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise click.BadParameter(f"cannot read {path}: {exc}", param_hint="--config") from None
    values: dict[str, str] = {}
    pending = ""
    for raw in [*text.splitlines(), ""]:  # "": ends a last continued line
        line = pending + raw.lstrip() if pending else raw.strip()
        if not pending and (not line or line[0] in "#!"):
            continue
        if (len(line) - len(line.rstrip("\\"))) % 2:
            pending = line[:-1]
            continue
        pending = ""
        match = _PROPERTY.match(line)
        if match:
            values[match["key"]] = match["value"].strip()
    return values


def _flag(text: str | None) -> bool:
    """Java's Boolean.parseBoolean: "true" in any case, else false."""
    return (text or "").strip().lower() == "true"


@dataclass(frozen=True)
class Connection:
    url: str
    auth_plugin: str = ""
    auth_params: str = ""
    tls_allow_insecure: bool = False
    tls_hostname_verification: bool = False
    tls_trust_cert_path: str = ""

    def authentication(self) -> pulsar.Authentication | None:
        """The authentication the plugin names (None without a plugin); a
        plugin or parameters nothing here understands are bad usage."""
        if not self.auth_plugin:
            return None
        try:
            auth = pulsar.Authentication(self.auth_plugin, self.auth_params)
        except (ValueError, RuntimeError, pulsar.PulsarException) as exc:
            raise click.BadParameter(str(exc), param_hint="--auth-params") from None
        if not auth.plugin_found:
            raise click.BadParameter(
                f"unknown authentication plugin {self.auth_plugin!r}", param_hint="--auth-plugin"
            )
        return auth

    def _security(self, auth: pulsar.Authentication | None) -> Security:
        return Security(
            use_tls=True,
            trust_certs_file=self.tls_trust_cert_path or None,
            allow_insecure=self.tls_allow_insecure,
            validate_hostname=self.tls_hostname_verification,
            authentication=auth,
        )

    def admin(self) -> Admin:
        """The admin REST caller: the authentication's headers, and for an
        https:// URL the TLS context (trust store, insecure, host names,
        the TLS authentication's client certificate)."""
        auth = self.authentication()
        headers: dict[str, str] = {}
        if auth is not None:
            try:
                asyncio.run(auth.prepare())
                headers = auth.http_headers()
            except pulsar.PulsarException as exc:
                fail(f"authentication: {exc}", REFUSED)
        verify: ssl.SSLContext | bool = True
        if self.url.lower().startswith("https://"):
            try:
                context = self._security(auth).ssl_context()
            except pulsar.PulsarException as exc:
                fail(str(exc), BAD_USAGE)
            verify = context if context is not None else True
        return Admin(self.url, headers=headers, verify=verify)

    def client(self) -> pulsar.Client:
        """Our client with this connection's authentication and TLS."""
        return pulsar.Client(
            self.url,
            authentication=self.authentication(),
            tls_trust_certs_file_path=self.tls_trust_cert_path or None,
            tls_allow_insecure_connection=self.tls_allow_insecure,
            tls_validate_hostname=self.tls_hostname_verification,
        )


def fail(message: str, code: int) -> NoReturn:
    """Print `error: message` on standard error and exit with `code`."""
    click.echo(f"error: {message}", err=True)
    raise SystemExit(code)


@contextlib.contextmanager
def client_errors() -> Iterator[None]:
    """Our client's exceptions as the exit codes of http.py: bad settings 2,
    an unreachable (or untrusted) broker 3, any other refusal 1."""
    try:
        yield
    except pulsar.PulsarException as exc:
        text = str(exc)
        if not text.startswith(type(exc).__name__):
            text = f"{type(exc).__name__}: {text}"
        if isinstance(exc, ValueError):
            fail(text, BAD_USAGE)
        if isinstance(exc, pulsar.ConnectError | pulsar.Timeout):
            fail(f"cannot reach the broker: {text}", UNREACHABLE)
        fail(text, REFUSED)


_OPTIONS = (
    "config",
    "auth_plugin",
    "auth_params",
    "tls_allow_insecure",
    "tls_enable_hostname_verification",
    "tls_trust_cert_path",
)


def _resolve(ctx: click.Context, kind: Kind, given: dict[str, Any]) -> Connection:
    """Each setting from the command line (or environment), else the
    config file, else the default."""
    conf = read_client_conf(given["config"]) if given["config"] else {}

    def pick(name: str, keys: tuple[str, ...]) -> Any:
        if ctx.get_parameter_source(name) not in (ParameterSource.DEFAULT, None):
            return given[name]
        for key in keys:
            if conf.get(key):
                return conf[key]
        return None

    def flag(name: str, key: str) -> bool:
        value = pick(name, (key,))
        return value if isinstance(value, bool) else _flag(value)

    return Connection(
        url=pick("url", _URLS[kind][3]) or _URLS[kind][2],
        auth_plugin=pick("auth_plugin", ("authPlugin",)) or "",
        auth_params=pick("auth_params", ("authParams",)) or "",
        tls_allow_insecure=flag("tls_allow_insecure", "tlsAllowInsecureConnection"),
        tls_hostname_verification=flag(
            "tls_enable_hostname_verification", "tlsEnableHostnameVerification"
        ),
        tls_trust_cert_path=pick("tls_trust_cert_path", ("tlsTrustCertsFilePath",)) or "",
    )


def _options(kind: Kind) -> list[Callable[[Callable[..., Any]], Callable[..., Any]]]:
    option, envvar, default, _keys = _URLS[kind]
    return [
        click.option(
            option,
            "url",
            default=default,
            show_default=True,
            envvar=envvar,
            help="The broker's URL (config file: " + " or ".join(_keys) + ").",
        ),
        click.option(
            "--config",
            type=click.Path(exists=True, dir_okay=False),
            envvar="MAGNETAR_CLIENT_CONF",
            help="A client.conf file (Java properties, Pulsar's keys).",
        ),
        click.option(
            "--auth-plugin",
            help="Authentication plugin: token, tls, basic, oauth2 "
            "or a Java class name (config file: authPlugin).",
        ),
        click.option(
            "--auth-params",
            help="The plugin's parameters, e.g. token:<jwt>, "
            "file:///path (config file: authParams).",
        ),
        click.option(
            "--tls-allow-insecure",
            is_flag=True,
            help="Accept an untrusted server certificate (tlsAllowInsecureConnection).",
        ),
        click.option(
            "--tls-enable-hostname-verification",
            is_flag=True,
            help="Check the server certificate's host name (tlsEnableHostnameVerification).",
        ),
        click.option(
            "--tls-trust-cert-path",
            help="CA certificates to trust, a PEM file (tlsTrustCertsFilePath).",
        ),
    ]


def connection_options(kind: Kind) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Add the URL, config file, authentication and TLS options to a click
    command; the command receives `connection: Connection` instead."""

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(command)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            given = {name: kwargs.pop(name) for name in ("url", *_OPTIONS)}
            ctx = click.get_current_context()
            return command(*args, connection=_resolve(ctx, kind, given), **kwargs)

        decorated: Callable[..., Any] = wrapper
        for option in reversed(_options(kind)):
            decorated = option(decorated)
        return decorated

    return decorate
