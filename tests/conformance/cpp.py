"""`make conformance-cpp SUITE=...`: the official C++ client's own test
suite (apache/pulsar-client-cpp `tests/`) against Magnetar brokers.

It builds that checkout's static library and its `pulsar-tests` and
`ConnectionFailTest` binaries with the system's packages (vcpkg off) in a
build directory outside our work tree, once (later runs only rebuild what
changed), then starts two brokers the way the suite's
`pulsar-test-service-start.sh` starts its two Pulsar containers (the main
service on 6650 / 8080 / 6651 / 8443, the "mim" one with the hostname
verification certificate on 6652 / 8081 / 6653 / 8444), makes the set-up
script's admin calls, and runs every test in its own process with a time
limit: one line per test, then a tally by source file.

The suite's other binaries (OAuth2, broker metadata, chunk dedup,
extensible load manager, scalable topics) each need a docker compose
set-up of their own and are listed as not run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

from tests.conformance import service
from tests.conformance.run import Result

HERE = Path(__file__).parent
MAIN = service.Ports()
MIM = service.Ports(binary=6652, http=8081, tls=6653, https=8444)
CONFIGS = {"main": HERE / "cpp-standalone-ssl.toml", "mim": HERE / "cpp-standalone-ssl-mim.toml"}
DEFAULT_BUILD = Path.home() / ".cache" / "magnetar" / "cpp-build"
BINARIES = ("pulsar-tests", "ConnectionFailTest")
# Binaries the suite's run-unit-tests.sh runs against docker compose
# set-ups of their own (a broker with other settings, an OAuth2 server, a
# cluster); reported as not run.
COMPOSE_BINARIES = {
    "Oauth2Test": "tests/oauth2/docker-compose.yml (an OAuth2 server container)",
    "BrokerMetadataTest": "tests/brokermetadata/docker-compose.yml (a broker with other settings)",
    "ChunkDedupTest": "tests/chunkdedup/docker-compose.yml (a broker with other settings)",
    "ExtensibleLoadManagerTest": "tests/extensibleLM/docker-compose.yml (a multi-broker cluster)",
    "pulsar-st-tests": "tests/st/docker-compose.yml (scalable topics)",
}
# Tests of pulsar-tests never run here, by name, with the reason.
_INTERNET = (
    "dials an internet address (an OAuth2 issuer on auth0.com or google.com);"
    " only loopback traffic is allowed here"
)
NEVER_RUN: dict[str, str] = {
    "AuthPluginTest.testOauth2": _INTERNET,
    "AuthPluginTest.testOauth2CredentialFile": _INTERNET,
    "AuthPluginTest.testOauth2WrongSecret": _INTERNET,
    "AuthPluginTest.testOauth2Failure": _INTERNET,
    "AuthPluginTest.testInitialize": _INTERNET,
    "ClientTest.testConnectTimeout": "dials 192.0.2.1; only loopback traffic is allowed here",
}

ANONYMOUS = {"anonymous": ["produce", "consume"]}
PRIVATE_AUTH = {"token-principal": ["produce", "consume"], "chained-client": ["produce", "consume"]}


def setup_calls(ports: service.Ports, main: bool) -> list[tuple[str, dict[str, object]]]:
    """The PUTs of build-support/start-*test-service-inside-container.sh, in
    order: (admin path, body). The mim service gets only the cluster and
    private/auth."""
    calls: list[tuple[str, dict[str, object]]] = [
        ("clusters/standalone", service.cluster_body(ports))
    ]
    if main:
        calls.append(
            ("tenants/public", {"adminRoles": ["anonymous"], "allowedClusters": ["standalone"]})
        )
        for ns in ("default", "default-2", "default-3"):
            calls.append((f"namespaces/public/{ns}", service.namespace_auth(ANONYMOUS)))
        calls.append(
            (
                "namespaces/public/default-4",
                service.namespace_auth(ANONYMOUS, encryption_required=True),
            )
        )
        calls.append(("namespaces/public/test-backlog-quotas", service.namespace_auth(ANONYMOUS)))
    calls.append(("tenants/private", {"adminRoles": [], "allowedClusters": ["standalone"]}))
    calls.append(("namespaces/private/auth", service.namespace_auth(PRIVATE_AUTH)))
    return calls


# ------------------------------------------------------------------ build


def build(suite: Path, build_dir: Path, jobs: int) -> None:
    """Configure once, then let make rebuild only what changed."""
    build_dir.mkdir(parents=True, exist_ok=True)
    if not (build_dir / "CMakeCache.txt").is_file():
        subprocess.run(
            [
                "cmake", "-S", str(suite), "-B", str(build_dir),
                "-DINTEGRATE_VCPKG=OFF", "-DBUILD_TESTS=ON", "-DBUILD_PERF_TOOLS=OFF",
                "-DBUILD_DYNAMIC_LIB=OFF", "-DBUILD_STATIC_LIB=ON",
                "-DCMAKE_BUILD_TYPE=Release",
            ],
            check=True,
        )  # fmt: skip
    subprocess.run(
        ["cmake", "--build", str(build_dir), "-j", str(jobs), "--target", *BINARIES], check=True
    )


# ------------------------------------------------------------------ tests


def list_tests(binary: Path) -> list[str]:
    """Full gtest names (Suite.test, Prefix/Suite.test/N) in the binary's order."""
    out = subprocess.run(
        [str(binary), "--gtest_list_tests"], capture_output=True, text=True, check=True
    ).stdout
    return parse_test_list(out)


def parse_test_list(out: str) -> list[str]:
    """--gtest_list_tests' output: a suite line ("Prefix/Suite.  # TypeParam
    = ...") then its tests indented ("  test/0  # GetParam() = ...")."""
    names: list[str] = []
    suite = ""
    for line in out.splitlines():
        if not line.strip():
            continue
        if not line.startswith(" "):
            suite = line.split("#", 1)[0].strip()
        else:
            names.append(suite + line.split("#", 1)[0].strip())
    return names


_TEST_MACRO = re.compile(r"^\s*(?:TEST|TEST_F|TEST_P|TYPED_TEST)\(\s*(\w+)\s*,", re.M)


def suite_files(suite: Path) -> dict[str, str]:
    """gtest suite name -> the source file that defines it (relative to tests/)."""
    files: dict[str, str] = {}
    tests = suite / "tests"
    for source in sorted([*tests.glob("*.cc"), *tests.glob("c/*.cc"), *tests.glob("unix/*.cc")]):
        for name in _TEST_MACRO.findall(source.read_text(errors="replace")):
            files.setdefault(name, str(source.relative_to(tests)))
    return files


def file_of(test: str, files: dict[str, str]) -> str:
    suite_name = test.split(".", 1)[0].split("/")[-1]
    return files.get(suite_name, "?")


def run_one(binary: Path, test: str, timeout: float, logs: Path) -> Result:
    if test in NEVER_RUN:
        return Result(test, "SKIP", 0.0, NEVER_RUN[test])
    if any(part.startswith("DISABLED_") for part in re.split(r"[./]", test)):
        return Result(test, "SKIP", 0.0, "disabled in the suite (DISABLED_)")
    log_file = logs / (re.sub(r"[^A-Za-z0-9_.-]", "_", test) + ".log")
    started = time.monotonic()
    with log_file.open("wb") as log:
        proc = subprocess.Popen(
            [str(binary), f"--gtest_filter={test}"],
            cwd=binary.parent,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "http_proxy": "", "https_proxy": ""},
            start_new_session=True,
        )
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return Result(test, "TIMEOUT", time.monotonic() - started, f"see {log_file}")
    seconds = time.monotonic() - started
    text = log_file.read_text(errors="replace")
    if code == 0 and "[  SKIPPED ]" in text:
        return Result(test, "SKIP", seconds, "skipped by the test itself (GTEST_SKIP)")
    if code == 0 and "[  PASSED  ] 1 test" in text:
        return Result(test, "PASS", seconds)
    return Result(test, "FAIL", seconds, _reason(text, code))


def _reason(text: str, code: int) -> str:
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.endswith("Failure") and ": " in line:
            where = line.rsplit("/", 1)[-1].removesuffix(": Failure")
            detail = " ".join(s.strip() for s in lines[i + 1 : i + 6] if s.strip())
            return f"{where}: {detail}"[:240]
    if code < 0:
        return f"killed by signal {-code}"
    return (lines[-1] if lines else f"exit {code}, no output")[:200]


def _matches(pattern: str, test: str) -> bool:
    """A substring, or several joined by " or "."""
    return not pattern or any(part.strip() in test for part in pattern.split(" or "))


@contextlib.contextmanager
def services(workdir: Path, suite: Path) -> Iterator[str]:
    """Both brokers started and set up; yields the superuser token."""
    secret_key = workdir / "secret.key"
    service.create_secret_key(secret_key)
    (suite / ".test-token.txt").write_text(service.token(secret_key, "token-principal") + "\n")
    superuser = service.token(secret_key, "superUser")
    with contextlib.ExitStack() as stack:
        for name, ports in (("main", MAIN), ("mim", MIM)):
            log = stack.enter_context(
                service.broker(
                    name=name,
                    workdir=workdir,
                    cwd=suite,
                    config=CONFIGS[name],
                    ports=ports,
                    secret_key=secret_key,
                )
            )
            print(f"broker {name} started on {ports.binary} / {ports.http} (log: {log})")
            for path, body in setup_calls(ports, main=name == "main"):
                print(f"set-up {name}: {path}: {service.put(ports, path, body, superuser)}")
        yield superuser


def tally(results: list[Result], files: dict[str, str]) -> list[tuple[str, dict[str, int]]]:
    by_file: dict[str, dict[str, int]] = {}
    for r in results:
        counts = by_file.setdefault(
            file_of(r.test, files), {"tests": 0, "PASS": 0, "FAIL": 0, "TIMEOUT": 0, "SKIP": 0}
        )
        counts["tests"] += 1
        counts[r.outcome] += 1
    return sorted(by_file.items())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("suite", type=Path, help="a checkout of apache/pulsar-client-cpp")
    parser.add_argument("--build-dir", type=Path, default=DEFAULT_BUILD)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="build jobs")
    parser.add_argument("--no-build", action="store_true", help="use the binaries as built")
    parser.add_argument("-k", dest="pattern", default="", help="only tests whose name has this")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds per test")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--keep", action="store_true", help="keep the broker logs and test logs")
    args = parser.parse_args(argv)
    suite = args.suite.resolve()
    if not (suite / "tests" / "PulsarFriend.h").is_file():
        parser.error(f"{suite} is not a checkout of apache/pulsar-client-cpp")
    build_dir = args.build_dir.resolve()
    if not args.no_build:
        build(suite, build_dir, args.jobs)
    binaries = {name: build_dir / "tests" / name for name in BINARIES}
    tests = [(b, t) for b in BINARIES for t in list_tests(binaries[b]) if _matches(args.pattern, t)]
    files = suite_files(suite)
    workdir = Path(tempfile.mkdtemp(prefix="magnetar-conformance-cpp-"))
    logs = workdir / "logs"
    logs.mkdir()
    results: list[Result] = []
    try:
        with services(workdir, suite):
            for binary, test in tests:
                result = run_one(binaries[binary], test, args.timeout, logs)
                results.append(result)
                detail = f"  {result.detail}" if result.detail else ""
                print(f"{result.outcome:<7} {result.seconds:6.1f}s  {test}{detail}", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"logs kept in {workdir}")
    print("\nby file: tests, passed, failed (timeouts), skipped")
    for name, counts in tally(results, files):
        failed = counts["FAIL"] + counts["TIMEOUT"]
        print(
            f"  {name:<36} {counts['tests']:4} {counts['PASS']:4} {failed:4}"
            f" ({counts['TIMEOUT']}) {counts['SKIP']:4}"
        )
    for binary, why in COMPOSE_BINARIES.items():
        print(f"  not run: {binary}: needs {why}")
    counts = {o: sum(r.outcome == o for r in results) for o in ("PASS", "FAIL", "TIMEOUT", "SKIP")}
    failed = counts["FAIL"] + counts["TIMEOUT"]
    ran = counts["PASS"] + failed
    share = 100.0 * counts["PASS"] / ran if ran else 0.0
    print(
        f"conformance-cpp: {counts['PASS']} passed, {failed} failed, {counts['SKIP']} skipped"
        f" ({share:.1f}% of the tests run)"
    )
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2))
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
