"""A geo-replication fault run (issue 45): two clusters, a and b, each one
standalone broker process (fsync, deduplication on), a namespace that
replicates to both, producers and consumers on both (georep_workload.py),
and seeded random faults between and in the clusters; then everything is
healed, the replication backlogs drain, every topic is read back on both
clusters, and the history is checked once per cluster with checker.py:
every send acknowledged on either cluster is stored exactly once on each,
in order per producer, and delivered to each cluster's consumers.
``python -m tests.chaos.georep_run`` runs it from the command line (`make
chaos-georep`; GEO_CHAOS_SECONDS, GEO_CHAOS_SEED, GEO_CHAOS_FAULTS,
GEO_CHAOS_RATE); the short test calls `run`.

The link between the clusters is a TCP proxy (tests/support/tcp_proxy.py)
in front of each broker, on an address of its own (127.0.0.2 for a,
127.0.0.3 for b) at the broker's port: the broker advertises that address
(LOOKUP's answer, which the remote's replicator follows) and binds
127.0.0.1, where the workload's clients reach it directly through the
advertised listener `clients`. So cutting the proxies cuts the replicators
only. No root needed. Faults, 3 to 8 seconds each, one at a time:

- ``partition``: both directions cut, either with resets (connections
  dropped, new ones closed at once) or silently (connections stay open,
  nothing passes either way);
- ``one-way``: one direction cut (one cluster's replicators cannot reach
  the other; the other's reach it), with resets or silently;
- ``half-open``: one direction's replies swallowed (the remote stores what
  the replicator sends, the receipts never come back);
- ``kill``: a broker SIGKILLed and restarted on its data when the fault ends;
- ``pause``: a broker SIGSTOPped, SIGCONTed when the fault ends.

A proxy's connections are dropped when its fault ends (a stream that lost
bytes cannot go on). After the final read both brokers are killed at once,
started again, and each topic is read once more on both (the checks as in
run.py's `_check_both`).

Positions: each cluster numbers its ledgers itself, so for one cluster's
check the receipts of the other cluster's sends get their ledger id offset
by `OFFSET` times the cluster's index plus one (a position the checked
cluster never has: only "stored once" applies to them).
"""

from __future__ import annotations

import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import date
from functools import partial
from pathlib import Path

from tests.chaos.checker import Op, Report, load
from tests.chaos.georep_workload import Setup, final_history
from tests.chaos.run import _check_both, _finish
from tests.support.brokers import BrokerProcess
from tests.support.georep import admin, link, register
from tests.support.http_calls import http_call
from tests.support.polling import eventually
from tests.support.ports import free_ports
from tests.support.tcp_proxy import TcpProxy

CLUSTERS = ("a", "b")
PROXY_HOSTS = {"a": "127.0.0.2", "b": "127.0.0.3"}
LISTENER = "clients"
FAULTS = ("partition", "one-way", "half-open", "kill", "pause")
TOPICS = {"geo-0": 0, "geo-1": 2}  # geo-1 partitioned, 2 partitions
PRODUCERS = 2  # per cluster and topic
RATE = 10.0  # sends per second per producer
OFFSET = 1 << 40
REPO = Path(__file__).resolve().parents[2]


class GeoClusters:
    """Two brokers as clusters a and b, linked through a proxy each way."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        ports = free_ports(2 * len(CLUSTERS))
        self.brokers: dict[str, BrokerProcess] = {}
        for i, name in enumerate(CLUSTERS):
            port, http_port = ports[2 * i], ports[2 * i + 1]
            self.brokers[name] = BrokerProcess(
                workdir / f"data-{name}",
                workdir / f"broker-{name}.log",
                ports=(port, http_port),
                cluster_name=name,
                broker_deduplication_enabled="true",
                sync_policy="fsync",
                log_level="warning",
                advertised_address=PROXY_HOSTS[name],
                advertised_listeners=f"{LISTENER}:pulsar://127.0.0.1:{port}",
            )
        # proxies[x]: in front of x, used by the other clusters' replicators.
        self.proxies: dict[str, TcpProxy] = {}

    def start(self) -> GeoClusters:
        for name, broker in self.brokers.items():
            broker.start()
            self.proxies[name] = TcpProxy(broker.port, host=PROXY_HOSTS[name], port=broker.port)
        link(self.brokers)
        for here, broker in self.brokers.items():
            for there, remote in self.brokers.items():
                if there != here:
                    url = f"pulsar://{PROXY_HOSTS[there]}:{remote.port}"
                    register(broker, there, remote, brokerServiceUrl=url)
            retention = {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}
            admin(broker, "POST", "/admin/v2/namespaces/public/geo/retention", retention)
            for topic, partitions in TOPICS.items():
                if partitions:
                    path = f"/admin/v2/persistent/public/geo/{topic}/partitions"
                    status, _ = http_call("PUT", broker.http_url + path, partitions)
                    assert status in (204, 409), status
        return self

    def setup(self, rate: float) -> Setup:
        clusters = {name: (f"pulsar://127.0.0.1:{b.port}", b.http_url)
                    for name, b in self.brokers.items()}  # fmt: skip
        return Setup(clusters, TOPICS, PRODUCERS, rate, LISTENER)

    def cut(self, name: str, how: str) -> None:
        """Cut the way into cluster `name`: reset, silent or replies."""
        proxy = self.proxies[name]
        if how == "reset":
            proxy.refuse_new.set()
            proxy.drop_connections()
        elif how == "silent":
            proxy.swallow_requests.set()
            proxy.swallow_replies.set()
        else:
            proxy.swallow_replies.set()

    def heal(self, name: str) -> None:
        proxy = self.proxies[name]
        proxy.drop_connections()
        for switch in (proxy.refuse_new, proxy.swallow_requests, proxy.swallow_replies):
            switch.clear()
        proxy.drop_connections()  # any opened between the first drop and the clears

    def signal(self, name: str, number: signal.Signals) -> None:
        process = self.brokers[name].proc
        assert process is not None
        process.send_signal(number)

    def restart_all(self) -> None:
        for broker in self.brokers.values():
            broker.kill()
        for broker in self.brokers.values():
            broker.start()

    def close(self) -> None:
        for proxy in self.proxies.values():
            proxy.close()
        for broker in self.brokers.values():
            broker.stop()


def _inject(
    geo: GeoClusters, rng: random.Random, kinds: tuple[str, ...]
) -> tuple[str, Callable[[], None]]:
    """Start one fault; its description and how to undo it."""
    kind = rng.choice(kinds)
    name = rng.choice(CLUSTERS)
    other = next(c for c in CLUSTERS if c != name)
    if kind in ("partition", "one-way", "half-open"):
        into = list(CLUSTERS) if kind == "partition" else [name]
        how = "replies" if kind == "half-open" else rng.choice(("reset", "silent"))
        for target in into:
            geo.cut(target, how)

        def undo() -> None:
            for target in into:
                geo.heal(target)

        if kind == "partition":
            return f"{kind} a<->b ({how})", undo
        return f"{kind} {other}->{name}" + ("" if how == "replies" else f" ({how})"), undo
    broker = geo.brokers[name]
    if kind == "pause":
        geo.signal(name, signal.SIGSTOP)
        return f"{kind} {name}", lambda: geo.signal(name, signal.SIGCONT)
    broker.kill()

    def restart() -> None:
        broker.start()

    return f"{kind} {name}", restart


@dataclass
class GeoOutcome:
    seed: int
    seconds: float
    reports: dict[str, Report]
    faults: list[str] = field(default_factory=list)
    recoveries: list[float] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(report.ok for report in self.reports.values())

    def kinds(self) -> Counter[str]:
        return Counter(fault.split()[0] for fault in self.faults)

    def summary(self) -> str:
        first = next(iter(self.reports.values()))
        lines = [
            f"seed {self.seed}: {len(self.faults)} faults {dict(self.kinds())}, "
            f"{first.sends} sends ({first.acknowledged} acknowledged)"
        ]
        for name, r in self.reports.items():
            lines.append(
                f"cluster {name}: {r.stored} stored, {r.received} deliveries "
                f"({r.redelivered} redelivered), caught up {r.recovery_seconds}, "
                f"anomalies: {len(r.anomalies)} {dict(r.kinds())}"
            )
            lines += [f"  {kind}: {detail}" for kind, detail in r.anomalies[:20]]
        if self.recoveries:
            lines.append(
                f"replication after healing: median {statistics.median(self.recoveries):.2f}s, "
                f"worst {max(self.recoveries):.2f}s over {len(self.recoveries)} faults"
            )
        return "\n".join(lines)

    def row(self) -> str:
        """A line of README's fault-run table."""
        first = next(iter(self.reports.values()))
        kinds = ", ".join(f"{n} {k}" for k, n in self.kinds().most_common())
        deliveries = " / ".join(
            f"{name}: {r.received:,} ({r.redelivered:,})" for name, r in self.reports.items()
        )
        anomalies = " / ".join(f"{name}: {len(r.anomalies)}" for name, r in self.reports.items())
        recovery = (
            f"{statistics.median(self.recoveries):.2f} s / {max(self.recoveries):.2f} s"
            if self.recoveries
            else "-"
        )
        return (
            f"| geo-replication, `make chaos-georep`, seed {self.seed}, {self.seconds:.0f} s "
            f"({date.today().isoformat()}) | {len(self.faults)} ({kinds}) | "
            f"{first.sends:,} | {deliveries} | {anomalies} | {recovery} |"
        )


def side_view(ops: list[Op], cluster: str) -> list[Op]:
    """The history as one cluster's check sees it: every send (the others'
    receipts offset, see the module's doc), that cluster's deliveries,
    final reads and catch-up, and the marks that concern both."""
    kept = []
    for op in ops:
        if op.kind == "send":
            if op.consumer != cluster and op.ledger >= 0:
                op = replace(op, ledger=op.ledger + OFFSET * (CLUSTERS.index(op.consumer) + 1))
            kept.append(op)
        elif op.kind in ("heal", "unfinished") or op.consumer == cluster:
            kept.append(op)
    return kept


def recoveries(ops: list[Op], heals: list[float]) -> list[float]:
    """Per heal: how long until every producer had a message, confirmed
    after the heal, delivered on the other cluster."""
    confirmed = {op.key: op for op in ops if op.kind == "send" and op.result == "ok"}
    producers = {op.producer for op in confirmed.values()}
    across = sorted(
        (op.time, op.producer, confirmed[op.key].time)
        for op in ops
        if op.kind == "receive"
        and op.key in confirmed
        and op.consumer != confirmed[op.key].consumer
    )
    found = []
    for healed in heals:
        waiting = set(producers)
        for at, producer, confirmed_at in across:
            if at >= healed and confirmed_at >= healed:
                waiting.discard(producer)
                if not waiting:
                    found.append(at - healed)
                    break
    return found


def _finals(history: Path) -> list[Op]:
    """Both clusters' final reads of a workload, each op marked with its cluster."""
    ops = []
    for cluster in CLUSTERS:
        path = final_history(history, cluster)
        if path.exists():
            ops += [replace(op, consumer=cluster) for op in load(path)]
    return ops


def _workload(geo: GeoClusters, setup: Path, history: Path, again: bool) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "tests.chaos.georep_workload"]
    command += ["--read-again"] if again else []
    with (geo.workdir / "workload.log").open("ab") as log:
        return subprocess.Popen(
            [*command, str(setup), str(history)],
            stdout=log,
            stderr=log,
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )


def _flowing(history: Path) -> bool:
    """Whether each cluster's consumers got a message from the other cluster."""
    across = set()
    for op in load(history):
        if op.kind == "receive" and op.producer and op.producer[0] != op.consumer:
            across.add(op.consumer)
    return across == set(CLUSTERS)


def run(
    workdir: Path,
    seconds: float,
    seed: int,
    say: Callable[[str], None] = print,
    kinds: tuple[str, ...] = FAULTS,
    rate: float = RATE,
) -> GeoOutcome:
    rng = random.Random(seed)
    say(
        f"georep chaos run: seed {seed}, {seconds:.0f}s, {rate:g} sends/s per producer, "
        f"faults {', '.join(kinds)}, work directory {workdir}"
    )
    geo = GeoClusters(workdir)
    workloads: list[subprocess.Popen[bytes]] = []
    try:
        geo.start()
        setup = workdir / "setup.json"
        geo.setup(rate).save(setup)
        history = workdir / "history.jsonl"
        history.touch()
        workload = _workload(geo, setup, history, again=False)
        workloads.append(workload)
        start = time.monotonic()
        eventually("replication flowing both ways", lambda: _flowing(history), 60.0)
        faults: list[str] = []
        heals: list[float] = []
        while time.monotonic() - start + 12 < seconds:
            if workload.poll() is not None:
                raise RuntimeError(f"the workload exited early; see {workdir / 'workload.log'}")
            what, undo = _inject(geo, rng, kinds)
            say(f"  {time.monotonic() - start:6.1f}s fault: {what}")
            time.sleep(rng.uniform(3.0, 8.0))
            undo()
            heals.append(time.monotonic())
            faults.append(what)
            time.sleep(rng.uniform(2.0, 5.0))
        workload.send_signal(signal.SIGUSR1)
        ops = _finish(workload, history) + _finals(history)
        geo.restart_all()
        again_history = workdir / "history-again.jsonl"
        again_history.touch()  # the read again writes only its final reads
        workloads.append(_workload(geo, setup, again_history, again=True))
        again = _finish(workloads[-1], again_history)
        again += _finals(again_history)
    finally:
        for process in workloads:  # left running only when the run broke off
            if process.poll() is None:
                process.kill()
                process.wait(10)
        geo.close()
    reports = {c: _check_both(side_view(ops, c), side_view(again, c)) for c in CLUSTERS}
    outcome = GeoOutcome(seed, seconds, reports, faults, recoveries(ops, heals))
    say(outcome.summary())
    return outcome


def main() -> int:
    seconds = float(os.environ.get("GEO_CHAOS_SECONDS") or "120")
    seed = int(os.environ.get("GEO_CHAOS_SEED") or random.SystemRandom().randrange(2**31))
    kinds = tuple((os.environ.get("GEO_CHAOS_FAULTS") or ",".join(FAULTS)).split(","))
    unknown = set(kinds) - set(FAULTS)
    if unknown:
        print(f"chaos-georep: unknown faults {sorted(unknown)}; known: {FAULTS}", file=sys.stderr)
        return 2
    rate = float(os.environ.get("GEO_CHAOS_RATE") or RATE)
    workdir = Path(tempfile.mkdtemp(prefix="magnetar-georep-chaos-"))
    outcome = run(workdir, seconds, seed, partial(print, flush=True), kinds, rate)
    print(outcome.row())
    print(
        f"seed {seed} (rerun: GEO_CHAOS_SEED={seed} GEO_CHAOS_SECONDS={seconds:g} "
        "make chaos-georep)"
    )
    return 0 if outcome.ok else 1


if __name__ == "__main__":
    sys.exit(main())
