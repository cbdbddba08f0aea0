"""`magnetar admin`, `produce` and `consume` against a broker with TLS,
authentication and authorization on (the `secured` fixture): the options
spelled as pulsar-admin and pulsar-client spell them (--auth-plugin,
--auth-params, --tls-trust-cert-path, --tls-allow-insecure,
--tls-enable-hostname-verification), the same through a client.conf file
(--config or MAGNETAR_CLIENT_CONF) and the precedence between them, and
refusals that exit non-zero with a message instead of a traceback."""

from __future__ import annotations

import uuid
from pathlib import Path

import jwt

from tests.integration.broker.test_broker_security import (
    NS,
    _tls,
    _token,
    ca,  # noqa: F401 (fixture)
    secured,  # noqa: F401 (fixture)
)
from tests.support.brokers import BrokerFactory, BrokerThread
from tests.support.certs import CertAuthority
from tests.support.cli import magnetar

TOKEN_PLUGIN = "org.apache.pulsar.client.impl.auth.AuthenticationToken"


def _topic() -> str:
    return f"persistent://{NS}/cli-{uuid.uuid4().hex[:8]}"


def _https(broker: BrokerThread) -> str:
    assert broker.server is not None
    return f"https://localhost:{broker.server.tls_http_port}"


def _tls_url(broker: BrokerThread) -> str:
    assert broker.server is not None
    return f"pulsar+ssl://localhost:{broker.server.tls_port}"


def _token_auth(role: str) -> list[str]:
    return ["--auth-plugin", "token", "--auth-params", f"token:{_token(role)}"]


def _conf(path: Path, **keys: str) -> str:
    """A client.conf as Pulsar ships it: comments, blank lines, spaces."""
    lines = ["# Pulsar client configuration", "", "! another comment style"]
    lines += [f"{key} = {value}" for key, value in keys.items()]
    lines += ["useTls=false", "tlsEnableHostnameVerification=false"]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _round_trip(produce_args: list[str], consume_args: list[str], topic: str) -> None:
    """Produce two messages with `produce_args`, consume them (from the
    earliest) with `consume_args`; both exit 0."""
    ran = magnetar("produce", topic, "-m", "s1,s2", *produce_args)
    assert ran.returncode == 0, ran.stderr
    assert "2 messages successfully produced" in ran.stderr
    ran = magnetar("consume", topic, "-s", "sub", "-n", "2", "-p", "Earliest", *consume_args)
    assert ran.returncode == 0, ran.stderr
    assert [line.rsplit("content:", 1)[1] for line in ran.stdout.splitlines()[1::2]] == [
        "s1",
        "s2",
    ]


def test_token_options_for_admin_produce_and_consume(
    secured: BrokerThread,  # noqa: F811
    tmp_path: Path,
) -> None:
    """--auth-plugin/--auth-params with a token: the admin (as a superuser)
    lists namespaces that an anonymous call may not; produce and consume
    (as alice, granted on the namespace) round-trip, with the plugin by
    short name, by Java class name, and a token read from a file://; alice
    may list her namespace's topics, not the tenant's namespaces."""
    admin = ["admin", "--admin-url", secured.http_url]
    ran = magnetar(*admin, "namespaces", "list", "public")
    assert ran.returncode == 1 and "401" in ran.stderr, ran.stderr
    ran = magnetar(*admin, *_token_auth("root"), "namespaces", "list", "public")
    assert ran.returncode == 0 and NS in ran.stdout.split(), ran.stderr
    token_file = tmp_path / "alice.jwt"
    token_file.write_text(_token("alice") + "\n")
    by_class = ["--auth-plugin", TOKEN_PLUGIN, "--auth-params", f"file://{token_file}"]
    url = ["--url", secured.url]
    _round_trip([*url, *by_class], [*url, *_token_auth("alice")], _topic())
    ran = magnetar(*admin, *by_class, "topics", "list", NS)
    assert ran.returncode == 0 and ran.stdout.startswith(f"persistent://{NS}/"), ran.stderr
    ran = magnetar(*admin, *by_class, "namespaces", "list", "public")
    assert ran.returncode == 1 and "401" in ran.stderr  # alice is no admin of the tenant


def test_perf_takes_the_same_options(secured: BrokerThread) -> None:  # noqa: F811
    """`magnetar perf produce|consume` reach a secured broker with the same
    --auth-plugin/--auth-params as produce and consume; without them the
    broker refuses the connection and perf exits non-zero."""
    topic, url = _topic(), ["--url", secured.url]
    create = ["admin", "--admin-url", secured.http_url, *_token_auth("root"), "topics"]
    assert magnetar(*create, "create", topic).returncode == 0
    ran = magnetar(*create, "create-subscription", topic, "-s", "perf", "--earliest")
    assert ran.returncode == 0, ran.stderr
    produce = ["perf", "produce", topic, "-m", "50", "-r", "0", "--size", "10", *url]
    refused = magnetar(*produce, timeout=90)
    assert refused.returncode != 0
    ran = magnetar(*produce, *_token_auth("alice"))
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines()[-1].startswith("summary: produced")
    ran = magnetar("perf", "consume", topic, "-m", "50", *url, *_token_auth("alice"))
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines()[-1].startswith("summary: consumed")  # after 50 (-m)


def test_config_file_and_its_precedence(
    secured: BrokerThread,  # noqa: F811
    tmp_path: Path,
) -> None:
    """A client.conf (webServiceUrl, brokerServiceUrl, authPlugin,
    authParams) given by --config or MAGNETAR_CLIENT_CONF serves admin,
    produce and consume alone (`key=value` or `key: value` lines, comments,
    continued lines); without brokerServiceUrl pulsar-client uses
    webServiceUrl (an HTTP lookup, with the token); a command-line option
    wins over the file (a URL, a token of a role without the grant)."""
    conf = _conf(
        tmp_path / "client.conf",
        webServiceUrl=f"{secured.http_url}/",  # as Pulsar's images write them
        brokerServiceUrl=f"{secured.url}/",
        authPlugin=TOKEN_PLUGIN,
        authParams=f"token:{_token('root')}",
    )
    ran = magnetar("admin", "--config", conf, "namespaces", "list", "public")
    assert ran.returncode == 0 and NS in ran.stdout.split(), ran.stderr
    ran = magnetar("admin", "namespaces", "list", "public", env={"MAGNETAR_CLIENT_CONF": conf})
    assert ran.returncode == 0 and NS in ran.stdout.split(), ran.stderr
    topic = _topic()
    ran = magnetar("produce", topic, "-m", "c1,c2", "--config", conf)
    assert ran.returncode == 0, ran.stderr
    ran = magnetar(
        "consume", topic, "-s", "sub", "-n", "2", "-p", "Earliest",
        env={"MAGNETAR_CLIENT_CONF": conf},
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines()[1::2] == [
        "key:[null], properties:[], content:c1",
        "key:[null], properties:[], content:c2",
    ]
    # Java properties' other forms: `key: value`, a line continued by a
    # backslash.
    http_only = tmp_path / "http.conf"
    alice = _token("alice")
    http_only.write_text(
        f"webServiceUrl: {secured.http_url}\n"
        "authPlugin=token\n"
        f"authParams=token:{alice[:20]}\\\n    {alice[20:]}\n"
    )
    _round_trip(["--config", str(http_only)], ["--config", str(http_only)], _topic())
    # The command line wins: URLs over a file naming closed ports, a token
    # over the file's.
    dead = _conf(
        tmp_path / "dead.conf",
        webServiceUrl="http://127.0.0.1:9",
        brokerServiceUrl="pulsar://127.0.0.1:9",
        authPlugin="token",
        authParams=f"token:{_token('root')}",
    )
    ran = magnetar("admin", "--config", dead, "--admin-url", secured.http_url, "tenants", "list")
    assert ran.returncode == 0 and "public" in ran.stdout.split(), ran.stderr
    _round_trip(
        ["--config", dead, "--url", secured.url], ["--config", dead, "--url", secured.url], topic
    )
    ran = magnetar("admin", "--config", dead, "tenants", "list")
    assert ran.returncode == 3 and "cannot reach" in ran.stderr
    ran = magnetar(
        "consume", topic, "-s", "bob", "--config", conf, "--auth-params", f"token:{_token('bob')}"
    )
    assert ran.returncode == 1 and "AuthorizationError" in ran.stderr, ran.stderr
    assert "Traceback" not in ran.stderr


def test_wrong_token_and_bad_settings_are_refused_clearly(
    secured: BrokerThread,  # noqa: F811
    tmp_path: Path,
) -> None:
    """A token signed with another key: the admin exits 1 with the
    broker's 401 reason, produce and consume exit 1 naming the
    authentication error (no traceback). An unknown plugin, a missing
    config file and a missing token file are bad usage (exit 2 / 1)."""
    forged = jwt.encode({"sub": "root"}, b"x" * 32, algorithm="HS256")
    wrong = ["--auth-plugin", "token", "--auth-params", f"token:{forged}"]
    ran = magnetar("admin", "--admin-url", secured.http_url, *wrong, "tenants", "list")
    assert ran.returncode == 1 and "error (401)" in ran.stderr, ran.stderr
    for command in (["produce", _topic(), "-m", "x"], ["consume", _topic(), "-s", "s"]):
        ran = magnetar(*command, "--url", secured.url, *wrong)
        assert ran.returncode == 1, ran.stderr
        assert "error: AuthenticationError" in ran.stderr and "Traceback" not in ran.stderr
    ran = magnetar("produce", _topic(), "-m", "x", "--url", secured.url, "--auth-plugin", "nope")
    assert ran.returncode == 2 and "unknown authentication plugin" in ran.stderr, ran.stderr
    ran = magnetar("admin", "--config", str(tmp_path / "missing.conf"), "tenants", "list")
    assert ran.returncode == 2 and "missing.conf" in ran.stderr
    missing = ["--auth-plugin", "token", "--auth-params", f"file://{tmp_path}/none.jwt"]
    ran = magnetar("admin", "--admin-url", secured.http_url, *missing, "tenants", "list")
    assert ran.returncode == 1 and "authentication" in ran.stderr, ran.stderr


def test_tls_options(
    secured: BrokerThread,  # noqa: F811
    ca: CertAuthority,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Over https:// and pulsar+ssl://: --tls-trust-cert-path (or the file's
    tlsTrustCertsFilePath) trusts the broker's CA; without it the admin
    finds the broker unreachable (exit 3, the certificate named), and
    --tls-allow-insecure accepts it anyway (admin, produce, consume); the
    tls plugin's client certificate is the role, for the admin (root) and
    for produce and consume (alice)."""
    trust = ["--tls-trust-cert-path", str(ca.pem.cert)]
    admin = ["admin", "--admin-url", _https(secured)]
    ran = magnetar(*admin, *trust, *_token_auth("root"), "tenants", "list")
    assert ran.returncode == 0 and "public" in ran.stdout.split(), ran.stderr
    ran = magnetar(*admin, *_token_auth("root"), "tenants", "list")
    assert ran.returncode == 3 and "CERTIFICATE_VERIFY_FAILED" in ran.stderr, ran.stderr
    ran = magnetar(*admin, "--tls-allow-insecure", *_token_auth("root"), "tenants", "list")
    assert ran.returncode == 0, ran.stderr
    root, alice = ca.issue("root"), ca.issue("alice")
    ran = magnetar(
        *admin, *trust, "--auth-plugin", "tls",
        "--auth-params", f"tlsCertFile:{root.cert},tlsKeyFile:{root.key}", "tenants", "list",
    )  # fmt: skip
    assert ran.returncode == 0 and "public" in ran.stdout.split(), ran.stderr
    as_alice = [
        "--url", _tls_url(secured), *trust, "--auth-plugin",
        "org.apache.pulsar.client.impl.auth.AuthenticationTls",
        "--auth-params", f"tlsCertFile:{alice.cert},tlsKeyFile:{alice.key}",
    ]  # fmt: skip
    _round_trip(as_alice, as_alice, _topic())
    conf = _conf(
        tmp_path / "tls.conf",
        webServiceUrl=_https(secured),
        brokerServiceUrl=_tls_url(secured),
        authPlugin="token",
        authParams=f"token:{_token('alice')}",
        tlsTrustCertsFilePath=str(ca.pem.cert),
    )
    _round_trip(["--config", conf], ["--config", conf], _topic())
    # Without a trust path our client (as the official one) retries until
    # its operation timeout (30 s): that insecure lets it in is shown below.
    insecure = ["--url", _tls_url(secured), "--tls-allow-insecure", *_token_auth("alice")]
    _round_trip(insecure, insecure, _topic())


def test_tls_hostname_verification(
    broker_factory: BrokerFactory,
    ca: CertAuthority,  # noqa: F811
    tmp_path: Path,
) -> None:
    """A broker whose certificate names another host: trusted by its CA it
    is served (pulsar-admin and pulsar-client check no host name by
    default); --tls-enable-hostname-verification (or the file's
    tlsEnableHostnameVerification=true) refuses it (exit 3)."""
    broker = broker_factory(**_tls(ca.issue("other", server=True, hosts=("other.example",))))
    trust = ["--tls-trust-cert-path", str(ca.pem.cert)]
    admin = ["admin", "--admin-url", _https(broker), *trust]
    assert magnetar(*admin, "tenants", "list").returncode == 0
    ran = magnetar(*admin, "--tls-enable-hostname-verification", "tenants", "list")
    assert ran.returncode == 3 and "cannot reach" in ran.stderr, ran.stderr
    topic = f"persistent://public/default/cli-{uuid.uuid4().hex[:8]}"
    url = ["--url", _tls_url(broker), *trust]
    _round_trip(url, url, topic)
    ran = magnetar("produce", topic, "-m", "x", *url, "--tls-enable-hostname-verification")
    assert ran.returncode == 3 and "cannot reach" in ran.stderr, ran.stderr
    conf = tmp_path / "strict.conf"
    conf.write_text(f"tlsEnableHostnameVerification=true\ntlsTrustCertsFilePath={ca.pem.cert}\n")
    ran = magnetar("admin", "--admin-url", _https(broker), "--config", str(conf), "tenants", "list")
    assert ran.returncode == 3 and "cannot reach" in ran.stderr, ran.stderr
