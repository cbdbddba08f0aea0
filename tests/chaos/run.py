"""One fault run: start the cluster and the workload, inject seeded random
faults for a while, heal everything, let the workload finish and check its
history. ``python -m tests.chaos.run`` runs it from the command line
(`make chaos`; CHAOS_SECONDS, CHAOS_SEED); the short test calls `run`."""

from __future__ import annotations

import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.chaos import netns
from tests.chaos.checker import Op, Report, check, load
from tests.chaos.cluster import REPO, ChaosCluster

FAULTS = ("broker-etcd", "broker-clients", "etcd-minority", "pause", "kill", "stalled-write")
# Only where the ledgers are in a bucket: a machine lost with its directory,
# the S3 server paused, one broker cut from it.
OBJECT_FAULTS = ("machine-lost", "object-store-pause", "object-store-cut")
TOPICS = 3
RATE = 20.0  # sends per second per topic
WORKLOAD_TIMEOUT = 300.0  # above the workload's own FINISH_SECONDS
STALL_SECONDS = 8.0  # a stalled write outlives its broker's lease and the takeover


@dataclass
class Outcome:
    seed: int
    report: Report
    faults: list[str] = field(default_factory=list)
    recoveries: list[float] = field(default_factory=list)

    def summary(self) -> str:
        r = self.report
        lines = [
            f"seed {self.seed}: {len(self.faults)} faults, {r.sends} sends "
            f"({r.acknowledged} acknowledged), {r.received} deliveries "
            f"({r.redelivered} redelivered), {r.stored} stored",
            f"anomalies: {len(r.anomalies)} {dict(r.kinds())}",
        ]
        if self.recoveries:
            lines.append(
                f"recovery after healing: median {statistics.median(self.recoveries):.2f}s, "
                f"worst {max(self.recoveries):.2f}s over {len(self.recoveries)} faults; "
                f"final catch-up {r.recovery_seconds}"
            )
        lines += [f"  {kind}: {detail}" for kind, detail in r.anomalies[:20]]
        return "\n".join(lines)


def _stalled_write(cluster: ChaosCluster, rng: random.Random) -> tuple[str, Callable[[], None]]:
    """A write in flight across a takeover: a broker's journal stops in the
    middle of a write (before it reaches a file) and the broker is cut from
    etcd; its topics move, and the write lands once the new owner has
    opened the ledger. The broker is one that had a write to hold (it owns
    a topic being written); a fence must keep that late write out."""
    for b in cluster.BROKERS:
        cluster.hold_writes(b)
    held = cluster.wait_held(list(cluster.BROKERS), 2.0)
    broker = rng.choice(held or list(cluster.BROKERS))
    for b in cluster.BROKERS:
        if b != broker:
            cluster.release_writes(b)
    cluster.net.isolate(broker, cluster.ETCDS)

    def undo() -> None:
        # The late write lands while the broker is still cut off.
        cluster.release_writes(broker, landed_within=5.0 if held else 0.0)
        cluster.net.rejoin(broker, cluster.ETCDS)

    return f"stalled-write {broker}" + ("" if held else " (no write was in flight)"), undo


def _inject(
    cluster: ChaosCluster, rng: random.Random, kinds: tuple[str, ...]
) -> tuple[str, Callable[[], None]]:
    """Start one fault; returns its description and how to undo it."""
    kind = rng.choice(kinds)
    net = cluster.net
    if kind == "stalled-write":
        return _stalled_write(cluster, rng)
    if kind == "object-store-pause":
        cluster.signal(cluster.S3, signal.SIGSTOP)
        return kind, lambda: cluster.signal(cluster.S3, signal.SIGCONT)
    if kind == "etcd-minority":
        member = rng.choice(cluster.ETCDS)
        others = [e for e in cluster.ETCDS if e != member]
        net.isolate(member, others)
        return f"{kind} {member}", lambda: net.rejoin(member, others)
    broker = rng.choice(cluster.BROKERS)
    if kind == "broker-etcd":
        net.isolate(broker, cluster.ETCDS)
        return f"{kind} {broker}", lambda: net.rejoin(broker, cluster.ETCDS)
    if kind == "broker-clients":
        net.cut(broker, cluster.CLIENT)
        return f"{kind} {broker}", lambda: net.heal(broker, cluster.CLIENT)
    if kind == "pause":
        cluster.signal(broker, signal.SIGSTOP)
        return f"{kind} {broker}", lambda: cluster.signal(broker, signal.SIGCONT)
    if kind == "object-store-cut":
        net.cut(broker, cluster.S3)
        return f"{kind} {broker}", lambda: net.heal(broker, cluster.S3)
    if kind == "machine-lost":
        cluster.lose_machine(broker)
        return f"{kind} {broker}", lambda: cluster.restart(broker)
    cluster.kill(broker)
    return f"{kind} {broker}", lambda: cluster.restart(broker)


def faults_for(storage: str) -> tuple[str, ...]:
    return FAULTS + OBJECT_FAULTS if storage == "object" else FAULTS


def _topic(producer: str) -> str:
    """Producer names are p<topic>e<epoch> (workload.py)."""
    return producer.partition("e")[0]


def recoveries(ops: list[Op], heals: list[float]) -> list[float]:
    """Per heal: how long until every topic had a send confirmed again."""
    producers = {_topic(op.producer) for op in ops if op.kind == "send"}
    oks = sorted(
        (op.time, _topic(op.producer)) for op in ops if op.kind == "send" and op.result == "ok"
    )
    found = []
    for healed in heals:
        waiting = set(producers)
        for at, producer in oks:
            if at >= healed:
                waiting.discard(producer)
                if not waiting:
                    found.append(at - healed)
                    break
    return found


def _finish(workload: subprocess.Popen[bytes], history: Path) -> list[Op]:
    """The workload's history once it ends; one that does not end in time
    (the cluster stopped answering) is killed, and what it recorded so far
    is checked with an ``unfinished`` mark (an anomaly)."""
    try:
        workload.wait(WORKLOAD_TIMEOUT)
    except subprocess.TimeoutExpired:
        workload.kill()
        workload.wait(10)
        return [*load(history), Op("unfinished", time.monotonic())]
    if workload.returncode != 0:
        raise RuntimeError(f"the workload failed; see {history.parent / 'workload.log'}")
    return load(history)


def run(
    network: netns.Network,
    workdir: Path,
    seconds: float,
    seed: int,
    say: Callable[[str], None] = print,
    variant: str = "safe",
    kinds: tuple[str, ...] | None = None,
    rate: float = RATE,
    storage: str = "files",
) -> Outcome:
    rng = random.Random(seed)
    if kinds is None:
        kinds = faults_for(storage)
    say(
        f"chaos run: seed {seed}, {seconds:.0f}s, {rate:g} sends/s per topic, "
        f"brokers {variant} on {storage}, work directory {workdir}"
    )
    cluster = ChaosCluster(network, workdir, variant, storage).start()
    history = workdir / "history.jsonl"
    workload = _client_process(cluster, history, TOPICS, rate)
    outcome_faults: list[str] = []
    heal_times: list[float] = []
    start = time.monotonic()
    time.sleep(5)  # warm up: producers and consumers attached
    while time.monotonic() - start + 12 < seconds:
        if workload.poll() is not None:
            raise RuntimeError(f"the workload exited early; see {workdir / 'workload.log'}")
        what, undo = _inject(cluster, rng, kinds)
        say(f"  {time.monotonic() - start:6.1f}s fault: {what}")
        hold = rng.uniform(3.0, 8.0)
        time.sleep(STALL_SECONDS if what.startswith("stalled-write") else hold)
        undo()
        heal_times.append(time.monotonic())
        outcome_faults.append(what)
        time.sleep(rng.uniform(2.0, 5.0))
    network.heal_all()
    workload.send_signal(signal.SIGUSR1)
    ops = _finish(workload, history)
    again = _read_again(cluster, workdir)
    report = _check_both(ops, again)
    outcome = Outcome(seed, report, outcome_faults, recoveries(ops, heal_times))
    say(outcome.summary())
    return outcome


def _check_both(ops: list[Op], again: list[Op]) -> Report:
    """The run's history checked as it is (the live cluster's final read),
    and again with the final read of the restarted brokers in its place;
    anomalies of the second check not found by the first are added, marked.
    When the live read failed, its gaps are not counted as losses: the
    outage is flagged (unreadable/unfinished) and the data is judged by the
    second read alone."""
    live_failed = any(op.kind in ("unreadable", "unfinished") for op in ops)
    kept = [op for op in ops if op.kind not in ("final", "fence")]
    second = check(kept + again)
    if live_failed:
        return second
    report = check(ops)
    seen = set(report.anomalies)
    for kind, detail in second.anomalies:
        if (kind, detail) not in seen:
            report.flag(kind, f"after the restart: {detail}")
    return report


def _client_process(
    cluster: ChaosCluster, history: Path, topics: int, rate: float | None
) -> subprocess.Popen[bytes]:
    """tests.chaos.workload in the client node, logging to workload.log;
    without a rate it only reads the topics back (`read_again`)."""
    admins = ",".join(cluster.http_url(b) for b in cluster.BROKERS)
    command = [sys.executable, "-m", "tests.chaos.workload"]
    if rate is None:
        command.append("--read-again")
    command += [cluster.service_url, admins, str(history), str(topics)]
    if rate is not None:
        command.append(str(rate))
    with (cluster.workdir / "workload.log").open("ab") as log:
        return cluster.net.popen(
            cluster.CLIENT,
            command,
            log=log,
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )


def _read_again(cluster: ChaosCluster, workdir: Path) -> list[Op]:
    """Every broker killed at once and started again, then each topic read
    back from the start once more: what a recovery makes of the files (the
    journals replayed, every ledger sealed again by a new owner), and a
    second chance to read when the live cluster could not."""
    cluster.restart_all()
    again = workdir / "history-again.jsonl"
    return _finish(_client_process(cluster, again, TOPICS, None), again)


def main() -> int:
    seconds = float(os.environ.get("CHAOS_SECONDS", "900"))
    seed = int(os.environ.get("CHAOS_SEED") or random.SystemRandom().randrange(2**31))
    reason = netns.unavailable()
    if reason is not None:
        print(f"chaos: cannot run here: {reason}", file=sys.stderr)
        return 2
    netns.remove_leftovers()
    network = netns.Network.create()
    try:
        workdir = Path(tempfile.mkdtemp(prefix="magnetar-chaos-"))
        variant = os.environ.get("CHAOS_BROKER_VARIANT") or "safe"
        storage = os.environ.get("CHAOS_STORAGE") or "object"
        known = faults_for(storage)
        kinds = tuple((os.environ.get("CHAOS_FAULTS") or ",".join(known)).split(","))
        unknown = set(kinds) - set(known)
        if unknown:
            print(f"chaos: unknown faults {sorted(unknown)}; known: {known}", file=sys.stderr)
            return 2
        rate = float(os.environ.get("CHAOS_RATE") or RATE)
        outcome = run(
            network,
            workdir,
            seconds,
            seed,
            variant=variant,
            kinds=kinds,
            rate=rate,
            storage=storage,
        )
    finally:
        network.close()
    print(f"seed {seed} (rerun: CHAOS_SEED={seed} CHAOS_STORAGE={storage} make chaos)")
    return 0 if outcome.report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
