"""`make conformance-js SUITE=...`: pulsar-flex's mocha suite (an independent
JavaScript client, written from the protocol alone) against a Magnetar broker.

The suite's CI runs Pulsar 2.8 standalone in docker with token auth, its own
secret key and superuser, automatic topic creation off and batch-index acks
on; its test helpers shell out to `docker exec <container> pulsar-admin ...`
and `pulsar-client produce|consume ...`. Here a broker from this checkout is
started the same way on the ports the suite hard-codes (6650, 8080), a
`docker` stand-in on PATH (docker_standin.py) maps those calls to
`magnetar admin`, `magnetar produce` and `magnetar consume`, and the suite's
set-up script's two admin calls are made through it. The suite's npm
dependencies are installed once into a cache outside both checkouts and
found through NODE_PATH, so nothing is written into SUITE.

Unit tests (the codec's) and broker tests run as two mocha runs; each test
gets a line, each run a tally. `--runs N` repeats the whole (a fresh broker
and data directory each time), as the acceptance asks for five in a row.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from tests.conformance import service
from tests.conformance.docker_standin import CONTAINER, STARTUP_DELAY_ENV

REPO = Path(__file__).resolve().parents[2]
CONFIG = Path(__file__).with_name("js-standalone.toml")
PORTS = service.Ports()
# Where the suite keeps its image's set-up (the broker's key, the admin token).
IMAGE = Path("scripts/docker/pulsar-jwt/2.8.0/build")
# The spec files that need a broker; every other *-spec.js tests the codec.
BROKER_SPECS = (
    "test/client/index-spec.js",
    "test/consumer/index-spec.js",
    "test/producer/index-spec.js",
)
MOCHA_TIMEOUT_MS = 60000  # the suite's package.json


@dataclass
class Outcome:
    name: str
    status: str  # PASS, FAIL, SKIP
    seconds: float
    detail: str = ""


# ------------------------------------------------------------ npm and mocha


def node_modules(suite: Path, cache: Path) -> Path:
    """The suite's dependencies (`npm ci` from its lock file), installed once
    per lock file under `cache`."""
    lock = (suite / "package-lock.json").read_bytes()
    place = cache / hashlib.sha256(lock).hexdigest()[:16]
    done = place / ".installed"
    if not done.exists():
        if shutil.which("npm") is None:
            raise SystemExit("npm is not installed (Node.js 14 or newer with npm is needed)")
        place.mkdir(parents=True, exist_ok=True)
        for name in ("package.json", "package-lock.json"):
            shutil.copyfile(suite / name, place / name)
        print(f"npm ci into {place} ...", flush=True)
        subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=place, check=True
        )
        done.touch()
    return place / "node_modules"


def spec_files(suite: Path) -> tuple[list[str], list[str]]:
    """(unit specs, broker specs), as paths relative to the suite."""
    every = sorted(str(p.relative_to(suite)) for p in (suite / "test").rglob("*-spec.js"))
    missing = [s for s in BROKER_SPECS if s not in every]
    if missing:
        raise SystemExit(f"{suite} has no {', '.join(missing)}: not a pulsar-flex checkout?")
    return [s for s in every if s not in BROKER_SPECS], list(BROKER_SPECS)


def mocha(
    suite: Path,
    modules: Path,
    specs: list[str],
    report: Path,
    env: dict[str, str],
    *,
    dry_run: bool = False,
    grep: str = "",
) -> int:
    """One mocha run of `specs` with its xunit report written to `report`;
    the tests' own output goes to a log beside it."""
    command = [
        "node",
        str(modules / "mocha" / "bin" / "mocha"),
        "--timeout",
        str(MOCHA_TIMEOUT_MS),
        "--exit",
        "--reporter",
        "xunit",
        "--reporter-option",
        f"output={report}",
        *(["--dry-run"] if dry_run else []),
        *(["--grep", grep] if grep else []),
        *specs,
    ]
    with report.with_suffix(".log").open("wb") as log:
        return subprocess.run(
            command, cwd=suite, env=env, stdout=log, stderr=subprocess.STDOUT, check=False
        ).returncode


def outcomes(report: Path) -> list[Outcome]:
    """The tests of an xunit report (a failed hook is one failure)."""
    if not report.is_file():
        return [Outcome("<mocha>", "FAIL", 0.0, f"no report; see {report.with_suffix('.log')}")]
    found = []
    for case in ET.parse(report).getroot().iter("testcase"):
        name = f"{case.get('classname', '')} :: {case.get('name', '')}"
        seconds = float(case.get("time") or 0)
        failure = case.find("failure")
        if failure is not None:
            text = (failure.get("message") or failure.text or "").strip().splitlines()
            found.append(Outcome(name, "FAIL", seconds, text[0][:160] if text else ""))
        elif case.find("skipped") is not None:
            found.append(Outcome(name, "SKIP", seconds))
        else:
            found.append(Outcome(name, "PASS", seconds))
    return found


# ---------------------------------------------------------------- one run


def standin_env(workdir: Path, suite: Path, modules: Path, delay: float) -> dict[str, str]:
    """The tests' environment: `docker` is the stand-in; the CLI it runs
    reads the broker's URLs and the admin token from a client.conf, as
    Pulsar's tools do in the suite's image."""
    bin_dir = workdir / "bin"
    bin_dir.mkdir()
    docker = bin_dir / "docker"
    docker.write_text(
        f'#!/bin/sh\nexec "{sys.executable}" -m tests.conformance.docker_standin "$@"\n'
    )
    docker.chmod(0o755)
    jwt = (suite / IMAGE / "admin-jwt.txt").read_text().strip()
    conf = workdir / "client.conf"
    conf.write_text(
        "# As the suite's image's /pulsar/conf/client.conf\n"
        f"webServiceUrl=http://localhost:{PORTS.http}/\n"
        f"brokerServiceUrl=pulsar://localhost:{PORTS.binary}/\n"
        "authPlugin=org.apache.pulsar.client.impl.auth.AuthenticationToken\n"
        f"authParams=token:{jwt}\n"
    )
    python_path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    return {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "NODE_PATH": str(modules),
        "PYTHONPATH": python_path,
        "MAGNETAR_CLIENT_CONF": str(conf),
        STARTUP_DELAY_ENV: str(delay),
    }


def set_up(env: dict[str, str]) -> None:
    """What the suite's scripts/test-setup.js does once Pulsar is up."""
    for args in (
        ["topics", "create", "public/default/test"],
        ["topics", "create-subscription", "-s", "subscription", "public/default/test"],
    ):
        command = ["docker", "exec", CONTAINER, "/pulsar/bin/pulsar-admin", *args]
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        status = "ok" if done.returncode == 0 else f"exit {done.returncode}: {done.stderr.strip()}"
        print(f"set-up: pulsar-admin {' '.join(args)}: {status}", flush=True)


def one_run(
    suite: Path,
    modules: Path,
    workdir: Path,
    delay: float,
    expected: dict[str, int],
    grep: str = "",
) -> dict[str, list[Outcome]]:
    env = standin_env(workdir, suite, modules, delay)
    secret_key = workdir / "admin-token.secret"
    shutil.copyfile(suite / IMAGE / "admin-token.txt", secret_key)
    unit, broker_specs = spec_files(suite)
    results: dict[str, list[Outcome]] = {}
    with service.broker(
        name="broker",
        workdir=workdir,
        cwd=workdir,
        config=CONFIG,
        ports=PORTS,
        secret_key=secret_key,
    ) as broker_log:
        print(f"broker started (log: {broker_log})", flush=True)
        set_up(env)
        for kind, specs in (("unit", unit), ("broker", broker_specs)):
            report = workdir / f"mocha-{kind}.xml"
            mocha(suite, modules, specs, report, env, grep=grep)
            results[kind] = outcomes(report)
            for outcome in results[kind]:
                detail = f"  {outcome.detail}" if outcome.detail else ""
                print(
                    f"{outcome.status:<5} {outcome.seconds:6.1f}s  {kind}: {outcome.name}{detail}",
                    flush=True,
                )
    for kind, found in results.items():
        passed = sum(o.status == "PASS" for o in found)
        print(f"{kind} tests: {passed}/{expected[kind]} passed", flush=True)
    return results


def count_tests(suite: Path, modules: Path, workdir: Path) -> dict[str, int]:
    """How many tests each kind has (mocha's dry run: nothing executes), so a
    test a failed hook never ran counts as not passed."""
    counts = {}
    for kind, specs in zip(("unit", "broker"), spec_files(suite), strict=True):
        report = workdir / f"mocha-dry-{kind}.xml"
        mocha(suite, modules, specs, report, dict(os.environ, NODE_PATH=str(modules)), dry_run=True)
        counts[kind] = len(outcomes(report))
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("suite", type=Path, help="a checkout of pulsar-flex")
    parser.add_argument("--runs", type=int, default=1, help="runs in a row (default 1)")
    parser.add_argument(
        "--cache",
        type=Path,
        default=Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
        / "magnetar"
        / "conformance-js",
        help="where the suite's npm dependencies are installed",
    )
    parser.add_argument(
        "--delay",
        type=float,
        default=1.0,
        help="seconds the stand-in waits before each call, as Pulsar's JVM tools take to start",
    )
    parser.add_argument("--keep", action="store_true", help="keep broker logs and reports")
    parser.add_argument("--grep", default="", help="only the tests whose title matches (mocha)")
    args = parser.parse_args(argv)
    suite = args.suite.resolve()
    if not (suite / "package-lock.json").is_file() or not (suite / IMAGE).is_dir():
        parser.error(f"{suite} is not a pulsar-flex checkout")
    modules = node_modules(suite, args.cache.resolve())
    top = Path(tempfile.mkdtemp(prefix="magnetar-conformance-js-"))
    clean_runs = 0
    expected = count_tests(suite, modules, top)
    try:
        for run in range(1, args.runs + 1):
            print(f"--- run {run} of {args.runs}", flush=True)
            workdir = top / f"run-{run}"
            workdir.mkdir()
            started = time.monotonic()
            results = one_run(suite, modules, workdir, args.delay, expected, args.grep)
            clean = all(
                sum(o.status == "PASS" for o in results.get(kind, [])) == expected[kind]
                and not any(o.status == "FAIL" for o in results.get(kind, []))
                for kind in expected
            )
            clean_runs += clean
            took = time.monotonic() - started
            print(f"run {run}: {'all passed' if clean else 'FAILED'} in {took:.0f} s", flush=True)
    finally:
        if args.keep:
            print(f"logs kept in {top}")
        else:
            shutil.rmtree(top, ignore_errors=True)
    print(
        f"conformance-js: {clean_runs} of {args.runs} runs all passed "
        f"({expected['unit']} unit, {expected['broker']} broker tests each)"
    )
    return 0 if clean_runs == args.runs else 1


if __name__ == "__main__":
    raise SystemExit(main())
