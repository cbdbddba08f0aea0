"""How much of Pulsar's admin v2 REST API Magnetar serves (issue 43).

`pulsar_admin_v2.tsv` is Pulsar's list (tag, method, path), taken from its
published swagger description. The broker's own route table (a standalone
broker started here on loopback, port 0) says what is served; every path not
served must have a reason below. `python -m tests.conformance.rest_coverage`
prints the table README shows; `--missing` lists each path not served.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

LIST = Path(__file__).with_name("pulsar_admin_v2.tsv")
# The tags the target counts (at least TARGET of their paths).
TARGET_TAGS = (
    "clusters",
    "tenants",
    "namespaces",
    "persistent topic",
    "non-persistent topic",
    "brokers",
    "broker-stats",
    "schemas",
)
TARGET = 0.75
# make test holds the route table to the target (issue 43); it only goes up.
FLOOR = TARGET
_PLACEHOLDER = re.compile(r"\{[^}]*\}")
_DOMAINS = ("persistent", "non-persistent")

# Why a Pulsar path is not served: the first pattern (searched in the path)
# that matches gives the reason. Ordered from specific to general.
REASONS: tuple[tuple[str, str], ...] = (
    (
        r"^/bookies|/persistence|bookieAffinity",
        "no BookKeeper: ledgers live in Magnetar's own storage",
    ),
    (
        r"offload|/scanOffloadedLedgers",
        "no tiered-storage offload (the object store holds ledgers directly)",
    ),
    (r"^/resource-quotas|^/resourcegroups|/resourcegroup", "no resource groups or quotas"),
    (r"^/worker", "no Pulsar Functions worker"),
    (
        r"antiAffinity|namespaceIsolationPolicies|failureDomains",
        "no broker isolation or anti-affinity placement",
    ),
    (
        r"/migrate|/clusters/\{[^}]*\}/peers|replicat|/replication",
        "no cluster migration or peer clusters (replication is set per namespace and topic)",
    ),
    (r"shadowTopics", "no shadow topics"),
    (r"entryFilters", "no entry filters (broker plugins)"),
    (r"maxUnackedMessages", "no unacked-message limits on consumers or subscriptions"),
    (
        r"subscriptionAuthMode|/permissions/subscription",
        "authorization modes Magnetar does not have",
    ),
    (
        r"/subscription/\{subName\}/properties",
        "subscriptions keep no string properties yet: planned",
    ),
    (
        r"schemaAutoUpdateCompatibilityStrategy",
        "deprecated in Pulsar: schemaCompatibilityStrategy replaces it",
    ),
    (
        r"\{bundle\}(/split)?$",
        "bundles are fixed ranges: no split or delete; topics by bundle planned",
    ),
    (
        r"/brokers/\{|/broker-stats/(ownership|load-report)|leaderBroker",
        "cluster mode only (`magnetar-broker cluster`)",
    ),
    (
        r"allocator-stats|bookieops|mbeans|broker-resource-availability|internal-configuration",
        "JVM and BookKeeper internals",
    ),
    (
        r"/configuration|/shutdown|backlog-quota-check",
        "broker configuration is read at start, not changed over REST",
    ),
    (r"/schemas/.*/version", "schema version lookup by schema: planned"),
)


@dataclass(frozen=True, slots=True)
class Endpoint:
    tag: str
    method: str
    path: str

    @property
    def shape(self) -> str:
        return _PLACEHOLDER.sub("{}", self.path)


def pulsar_endpoints(path: Path = LIST) -> list[Endpoint]:
    found = []
    for line in path.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        tag, method, route = line.split("\t")
        found.append(Endpoint(tag, method, route))
    return found


def served_shapes(routes: Iterable[tuple[str, str]]) -> set[tuple[str, str]]:
    """(method, shape) pairs under /admin/v2 from the broker's route table;
    our {domain} stands for both topic domains."""
    shapes = set()
    prefix = "/admin/v2"
    for method, pattern in routes:
        if not pattern.startswith(prefix + "/"):
            continue
        path = pattern[len(prefix) :]
        variants = [path]
        if path.startswith("/{domain}/"):
            variants = [f"/{d}{path[len('/{domain}') :]}" for d in _DOMAINS]
        for variant in variants:
            shapes.add((method, _PLACEHOLDER.sub("{}", variant)))
    return shapes


def reason_for(endpoint: Endpoint) -> str | None:
    for pattern, reason in REASONS:
        if re.search(pattern, endpoint.path, re.IGNORECASE):
            return reason
    return None


def broker_routes() -> list[tuple[str, str]]:
    """The route table of a standalone broker started here."""
    from tests.support.brokers import BrokerThread, broker_config

    with tempfile.TemporaryDirectory() as data:
        broker = BrokerThread(broker_config(Path(data))).start()
        try:
            assert broker.server is not None
            return broker.server.http_routes
        finally:
            broker.stop()


@dataclass(frozen=True, slots=True)
class Report:
    served: dict[str, list[Endpoint]]
    missing: dict[str, list[Endpoint]]

    def target_ratio(self) -> float:
        served = sum(len(self.served.get(t, [])) for t in TARGET_TAGS)
        total = served + sum(len(self.missing.get(t, [])) for t in TARGET_TAGS)
        return served / total if total else 1.0

    def unexplained(self) -> list[Endpoint]:
        return [e for t in TARGET_TAGS for e in self.missing.get(t, []) if reason_for(e) is None]


def report(endpoints: list[Endpoint], routes: Iterable[tuple[str, str]]) -> Report:
    shapes = served_shapes(routes)
    served: dict[str, list[Endpoint]] = {}
    missing: dict[str, list[Endpoint]] = {}
    for endpoint in endpoints:
        side = served if (endpoint.method, endpoint.shape) in shapes else missing
        side.setdefault(endpoint.tag, []).append(endpoint)
    return Report(served, missing)


def table(result: Report) -> str:
    tags = sorted(set(result.served) | set(result.missing))
    lines = ["| tag | served / total | not served, why |", "| --- | --- | --- |"]
    for tag in tags:
        served, missing = len(result.served.get(tag, [])), len(result.missing.get(tag, []))
        reasons: dict[str, int] = {}
        for endpoint in result.missing.get(tag, []):
            why = reason_for(endpoint) or "no reason given"
            reasons[why] = reasons.get(why, 0) + 1
        why_text = "; ".join(f"{why} ({n})" for why, n in sorted(reasons.items()))
        lines.append(f"| {tag} | {served} / {served + missing} | {why_text} |")
    lines.append(f"\nTarget tags: {result.target_ratio():.0%} served (target {TARGET:.0%}).")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--missing", action="store_true", help="list each path not served")
    args = parser.parse_args(argv)
    result = report(pulsar_endpoints(), broker_routes())
    print(table(result))
    if args.missing:
        for tag in sorted(result.missing):
            for e in result.missing[tag]:
                print(f"{tag}\t{e.method}\t{e.path}\t{reason_for(e) or '-'}")
    return 0 if result.target_ratio() >= TARGET and not result.unexplained() else 1


if __name__ == "__main__":
    sys.exit(main())
