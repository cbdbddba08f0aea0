"""`make conformance SUITE=...`: the official Python client's own test suite
(apache/pulsar-client-python `tests/`) against a Magnetar broker.

It starts a broker from this checkout on localhost 6650 / 8080 (the ports the
suite hard-codes) with a fresh data directory, applies the set-up the
suite's CI applies to its Pulsar (build-support/start-test-service-inside-
container.sh) as far as Magnetar supports it yet, then runs every test of
the chosen files in its own process with a time limit, so one client crash
fails one test and not the run. One line per test, then a tally.

Tests that dial 192.0.2.1 are never run: nothing here may send traffic to
any address but loopback.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from tests.conformance import service
from tests.support.seaweedfs import BUCKET, SeaweedServer

FILES = (
    "pulsar_test.py",
    "reader_test.py",
    "asyncio_test.py",
    "schema_test.py",
    "table_view_test.py",
)
# With our client in the official one's place, the suite's files that test
# the Python layer only (loggers, interrupts) are ours to pass too.
MAGNETAR_FILES = (*FILES, "custom_logger_test.py", "debug_logger_test.py", "interrupted_test.py")
# `--client magnetar`: this folder on PYTHONPATH and its plugin loaded make
# the suite's `pulsar`, `pulsar.*` and `_pulsar` imports our modules.
ALIAS_DIR = Path(__file__).with_name("alias")
ALIAS_PLUGIN = ["-p", "magnetar_as_pulsar"]
# They connect to 192.0.2.1 (TEST-NET-1): never run here.
NEVER_RUN = {
    "test_connect_timeout": "dials 192.0.2.1; only loopback traffic is allowed here",
    "test_auto_cluster_failover_client": "dials 192.0.2.1; only loopback traffic is allowed here",
    "test_service_info_provider_client": "dials 192.0.2.1; only loopback traffic is allowed here",
}
CONFIG = Path(__file__).with_name("standalone-ssl.toml")
PORTS = service.Ports()


@dataclass
class Result:
    test: str
    outcome: str  # PASS, FAIL, TIMEOUT, SKIP
    seconds: float
    detail: str = ""


ANONYMOUS = {"anonymous": ["produce", "consume"]}
TOKEN_PRINCIPAL = {"token-principal": ["produce", "consume"]}

# What the suite's CI does to its Pulsar, in order, as the superuser.
SETUP: list[tuple[str, Callable[[str], str]]] = [
    (
        "cluster standalone",
        lambda t: service.put(PORTS, "clusters/standalone", service.cluster_body(PORTS), t),
    ),
    (
        "tenant public",
        lambda t: service.put(
            PORTS,
            "tenants/public",
            {"adminRoles": ["anonymous"], "allowedClusters": ["standalone"]},
            t,
        ),
    ),
    (
        "namespace public/default",
        lambda t: service.put(
            PORTS, "namespaces/public/default", service.namespace_auth(ANONYMOUS), t
        ),
    ),
    (
        "namespace public/default-2",
        lambda t: service.put(
            PORTS, "namespaces/public/default-2", service.namespace_auth(ANONYMOUS), t
        ),
    ),
    (
        "tenant private",
        lambda t: service.put(
            PORTS, "tenants/private", {"adminRoles": [], "allowedClusters": ["standalone"]}, t
        ),
    ),
    (
        "namespace private/auth",
        lambda t: service.put(
            PORTS, "namespaces/private/auth", service.namespace_auth(TOKEN_PRINCIPAL), t
        ),
    ),
]


@contextlib.contextmanager
def broker(workdir: Path, suite: Path, storage: str = "files") -> Iterator[tuple[Path, str]]:
    """The broker as the suite's CI runs Pulsar (standalone-ssl.toml, started
    in the suite's folder), and a superuser token for the set-up. With
    ``storage`` "object" its ledgers go to a SeaweedFS started here."""
    secret_key = workdir / "secret.key"
    service.create_secret_key(secret_key)
    # What the suite's script writes for its token tests.
    (suite / ".test-token.txt").write_text(service.token(secret_key, "token-principal") + "\n")
    with contextlib.ExitStack() as stack:
        settings: dict[str, object] = {}
        if storage == "object":
            bucket = SeaweedServer(workdir / "seaweedfs").start()
            stack.callback(bucket.stop)
            os.environ.update(bucket.env())  # the broker's credentials, the standard way
            settings = {
                "storage": "object",
                "object_store_url": f"s3://{BUCKET}/conformance",
                "object_store_endpoint": bucket.endpoint,
            }
        log_path = stack.enter_context(
            service.broker(
                name="broker",
                workdir=workdir,
                cwd=suite,
                config=CONFIG,
                ports=PORTS,
                secret_key=secret_key,
                **settings,
            )
        )
        yield log_path, service.token(secret_key, "superUser")


# ------------------------------------------------------------------- tests


def client_env(client: str) -> tuple[list[str], dict[str, str]]:
    """The pytest arguments and environment that run the suite with `client`."""
    if client == "official":
        return [], dict(os.environ)
    path = os.pathsep.join(p for p in (str(ALIAS_DIR), os.environ.get("PYTHONPATH", "")) if p)
    return ALIAS_PLUGIN, {**os.environ, "PYTHONPATH": path}


def collect(suite: Path, files: tuple[str, ...], client: str = "official") -> list[str]:
    """Node ids (file::Class::test) of the chosen files, in file order."""
    plugin, env = client_env(client)
    ids: list[str] = []
    for name in files:
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "--collect-only",
                "-q",
                "-p",
                "no:cacheprovider",
                *plugin,
                name,
            ],
            cwd=suite,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        found = [line for line in out.stdout.splitlines() if line.startswith(f"{name}::")]
        if not found:
            ids.append(f"{name}::<collection>")  # reported as one failure with the reason
        ids.extend(found)
    return ids


def run_one(suite: Path, node: str, timeout: float, logs: Path, client: str = "official") -> Result:
    name = node.rsplit("::", 1)[-1]
    if name in NEVER_RUN:
        return Result(node, "SKIP", 0.0, NEVER_RUN[name])
    log_file = logs / (re.sub(r"[^A-Za-z0-9_.-]", "_", node) + ".log")
    started = time.monotonic()
    target = node.split("::", 1)[0] if node.endswith("::<collection>") else node
    plugin, env = client_env(client)
    command = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *plugin]
    command.append(target)
    if node.endswith("::<collection>"):
        command.append("--collect-only")
    with log_file.open("wb") as log:
        proc = subprocess.Popen(
            command,
            cwd=suite,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            preexec_fn=_default_sigint,
        )
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return Result(node, "TIMEOUT", time.monotonic() - started, f"see {log_file}")
    seconds = time.monotonic() - started
    if code == 0 and not node.endswith("::<collection>"):
        return Result(node, "PASS", seconds)
    return Result(node, "FAIL", seconds, _reason(log_file))


def _default_sigint() -> None:
    """A test process gets SIGINT's default action, whatever ours has: a
    shell runs background jobs with SIGINT ignored, and an ignored SIGINT
    stays ignored across exec, so interrupted_test.py's raise_signal would
    do nothing (Python installs its KeyboardInterrupt handler only over the
    default)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _reason(log_file: Path) -> str:
    lines = log_file.read_text(errors="replace").splitlines()
    errors = [line[2:].strip() for line in lines if line.startswith("E ")]
    if errors:
        return errors[0][:160]
    summary = [line for line in lines if line.startswith(("FAILED", "ERROR"))]
    return (summary[0] if summary else (lines[-1] if lines else "no output"))[:160]


def _matches(pattern: str, node: str) -> bool:
    """A substring, or several joined by " or " (the part of pytest's -k we need)."""
    return not pattern or any(part.strip() in node for part in pattern.split(" or "))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("suite", type=Path, help="the tests/ folder of apache/pulsar-client-python")
    parser.add_argument(
        "-k", dest="pattern", default="", help="only tests whose id has this ('a or b': either)"
    )
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per test")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument(
        "--client",
        choices=("official", "magnetar"),
        default="official",
        help="the client the suite imports as `pulsar` (default: the official one)",
    )
    parser.add_argument(
        "--storage",
        choices=("files", "object"),
        default="files",
        help="the broker's ledgers on files (default) or on a local SeaweedFS bucket",
    )
    parser.add_argument("--files", default="", help="comma-separated test files")
    parser.add_argument("--keep", action="store_true", help="keep the broker log and test logs")
    args = parser.parse_args(argv)
    suite = args.suite.resolve()
    if not (suite / "pulsar_test.py").is_file():
        parser.error(f"{suite} is not the suite's tests/ folder (no pulsar_test.py)")
    files = (
        args.files.split(",")
        if args.files
        else (MAGNETAR_FILES if args.client == "magnetar" else FILES)
    )
    collected = collect(suite, tuple(files), args.client)
    nodes = [n for n in collected if _matches(args.pattern, n)]
    workdir = Path(tempfile.mkdtemp(prefix="magnetar-conformance-"))
    logs = workdir / "logs"
    logs.mkdir()
    results: list[Result] = []
    try:
        with broker(workdir, suite, args.storage) as (broker_log, superuser):
            print(
                f"broker started (log: {broker_log}); client: {args.client}; "
                f"storage: {args.storage}"
            )
            for what, step in SETUP:
                print(f"set-up: {what}: {step(superuser)}")
            for node in nodes:
                result = run_one(suite, node, args.timeout, logs, args.client)
                results.append(result)
                detail = f"  {result.detail}" if result.detail else ""
                print(f"{result.outcome:<7} {result.seconds:6.1f}s  {node}{detail}", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"logs kept in {workdir}")
    counts = {o: sum(r.outcome == o for r in results) for o in ("PASS", "FAIL", "TIMEOUT", "SKIP")}
    failed = counts["FAIL"] + counts["TIMEOUT"]
    print(f"conformance: {counts['PASS']} passed, {failed} failed, {counts['SKIP']} skipped")
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2))
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
