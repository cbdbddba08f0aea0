"""The geo-replication fault run's workload (georep_run.py starts it):
``python -m tests.chaos.georep_workload SETUP HISTORY`` (``--read-again``
first: only the final reads, see `read_again`). SETUP is a JSON `Setup`.

Active-active: on every cluster, `producers` producers per topic
(deduplication on in the brokers, send timeout 0, no batching, sequence ids
given here: the client retries every send until it is answered), each
topic in a namespace that replicates to every cluster, and on every
cluster one consumer per topic acknowledging everything, so each cluster's
consumer sees its own producers' messages and, through the replicators,
the other clusters'. A producer of a partitioned topic writes one partition
(its index modulo the partition count), so its order is one partition's.
The clients reach their own cluster directly (the listener `listener`);
the replicators go through the proxies the controller cuts.

Ops are recorded as in workload.py (checker.py), with the cluster in
`consumer`: a send's is the cluster it was sent to (its receipt's position
is that cluster's), a receive's the cluster of the consumer. On SIGUSR1
(every fault healed) it stops sending, waits for every send's answer, for
each cluster's consumers to have received every acknowledged send (one
``caught_up`` per cluster), and for every replicator's backlog to be 0;
then it reads each topic (each partition) from the start on every cluster,
into HISTORY's sibling ``<stem>-final-<cluster>.jsonl``. Every wait is
bounded, as in workload.py.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pulsar

from tests.chaos.checker import Op
from tests.chaos.workload import (
    FINISH_SECONDS,
    History,
    _wait,
    consume_until,
    read_back,
)
from tests.support.http_calls import http_call
from tests.support.polling import eventually

NAMESPACE = "public/geo"
_LOGGER = logging.getLogger("chaos.georep")
_LOGGER.setLevel(logging.ERROR)


@dataclass(frozen=True)
class Setup:
    # cluster name -> (its service URL, its admin URL)
    clusters: dict[str, tuple[str, str]]
    # topic (local name in NAMESPACE) -> partitions (0: not partitioned)
    topics: dict[str, int]
    producers: int  # per cluster and topic
    rate: float  # sends per second per producer
    listener: str  # the brokers' advertised listener for clients

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self)))

    @classmethod
    def load(cls, path: Path) -> Setup:
        found = json.loads(path.read_text())
        clusters = {name: (url, web) for name, (url, web) in found["clusters"].items()}
        return cls(clusters, found["topics"], found["producers"], found["rate"], found["listener"])

    def topic(self, name: str) -> str:
        return f"persistent://{NAMESPACE}/{name}"

    def partitions(self) -> list[str]:
        """Every topic, a partitioned one as its partitions."""
        found = []
        for name, count in self.topics.items():
            if count == 0:
                found.append(self.topic(name))
            else:
                found += [f"{self.topic(name)}-partition-{i}" for i in range(count)]
        return found

    def client(self, cluster: str) -> Any:
        return pulsar.Client(
            self.clusters[cluster][0],
            operation_timeout_seconds=30,
            connection_timeout_ms=3000,
            logger=_LOGGER,
            listener_name=self.listener,
        )


def final_history(history: Path, cluster: str) -> Path:
    """Where the final read of `cluster` goes."""
    return history.with_name(f"{history.stem}-final-{cluster}.jsonl")


def label(cluster: str, topic: int, producer: int) -> str:
    """A producer's name: its cluster, topic and index (a0p1)."""
    return f"{cluster}{topic}p{producer}"


def replication_drained(setup: Setup) -> bool:
    """Whether every replicator of every topic partition on every cluster
    reports a backlog of 0 (and exists: its topic is loaded)."""
    for cluster, (_, web) in setup.clusters.items():
        remotes = [other for other in setup.clusters if other != cluster]
        for name in setup.partitions():
            path = name.replace("persistent://", "/admin/v2/persistent/")
            try:
                status, stats = http_call("GET", f"{web}{path}/stats")
            except (OSError, ValueError):
                return False
            if status != 200 or not isinstance(stats, dict):
                return False
            replication = stats.get("replication", {})
            for remote in remotes:
                if replication.get(remote, {}).get("replicationBacklog", -1) != 0:
                    return False
    return True


def _final_reads(setup: Setup, clients: dict[str, Any], history: Path, deadline: float) -> None:
    """Backlogs drained (bounded), then every topic read on every cluster."""
    try:
        eventually("replication drained", lambda: replication_drained(setup),
                   max(0.0, deadline - time.monotonic()))  # fmt: skip
    except AssertionError as exc:  # the final reads show what is missing
        print(exc, file=sys.stderr)
    for cluster, client in clients.items():
        finals = History(final_history(history, cluster))
        for name in setup.partitions():
            read_back(client, name, finals, deadline)
        finals.close()
    # Closing clients with sends still open could wait forever; the history
    # is written, so the process ends here.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def read_again(setup: Setup, history: Path) -> None:
    """Only the final reads (after the controller restarted the brokers)."""
    clients = {cluster: setup.client(cluster) for cluster in setup.clusters}
    _final_reads(setup, clients, history, time.monotonic() + FINISH_SECONDS)


class _Producers:
    """Every producer of every cluster and what its sends came to."""

    def __init__(self, setup: Setup, clients: dict[str, Any], history: History) -> None:
        self.history = history
        self.acked: set[tuple[str, int]] = set()
        self.unanswered: set[tuple[str, int]] = set()
        self.next_id: dict[str, int] = {}
        self.cluster_of: dict[str, str] = {}
        # (producer, its label, its cluster)
        self.all: list[tuple[Any, str, str]] = []
        for cluster, client in clients.items():
            for t, (name, partitions) in enumerate(setup.topics.items()):
                for i in range(setup.producers):
                    options: dict[str, Any] = {}
                    if partitions:
                        options["message_router"] = route_to(i)
                    producer = client.create_producer(
                        setup.topic(name),
                        producer_name=label(cluster, t, i),
                        send_timeout_millis=0,
                        batching_enabled=False,
                        block_if_queue_full=True,
                        **options,
                    )
                    self.all.append((producer, label(cluster, t, i), cluster))
                    self.cluster_of[label(cluster, t, i)] = cluster

    def send_all(self, seq: int) -> None:
        for producer, name, cluster in self.all:
            # Explicit sequence ids: see workload.py.
            sequence_id = self.next_id.get(name, 0)
            self.next_id[name] = sequence_id + 1
            with self.history.lock:
                self.unanswered.add((name, seq))
            try:
                producer.send_async(
                    f"{name}:{seq}".encode(),
                    self._answered(name, seq, cluster),
                    sequence_id=sequence_id,
                )
            except Exception as exc:
                with self.history.lock:
                    self.unanswered.discard((name, seq))
                self.history.add(Op("send", time.monotonic(), name, seq, "fail", consumer=cluster))
                print(f"send_async failed: {exc!r}", file=sys.stderr)

    def _answered(self, name: str, seq: int, cluster: str) -> Callable[[Any, Any], None]:
        def done(result: Any, mid: Any) -> None:
            ok = result == pulsar.Result.Ok
            ledger, entry = (mid.ledger_id(), mid.entry_id()) if ok else (-1, -1)
            self.history.add(Op("send", time.monotonic(), name, seq, "ok" if ok else "fail",
                                ledger, entry, consumer=cluster))  # fmt: skip
            with self.history.changed:
                self.unanswered.discard((name, seq))
                if ok:
                    self.acked.add((name, seq))
                self.history.changed.notify_all()

        return done


def _has_all(acked: set[tuple[str, int]], received: set[tuple[str, int]]) -> bool:
    return acked <= received


def route_to(index: int) -> Callable[[Any, int], int]:
    """A producer's partition: its index modulo the partition count."""
    return lambda _msg, partitions: index % partitions


def run(setup: Setup, history_path: Path) -> None:
    healed = threading.Event()
    signal.signal(signal.SIGUSR1, lambda *_: healed.set())
    history = History(history_path)
    clients = {cluster: setup.client(cluster) for cluster in setup.clusters}
    received: dict[str, set[tuple[str, int]]] = {cluster: set() for cluster in clients}
    stop_consuming = threading.Event()

    threads = []
    for cluster, client in clients.items():
        for name in setup.topics:
            consumer = client.subscribe(
                setup.topic(name),
                "chaos",
                consumer_type=pulsar.ConsumerType.Exclusive,
                initial_position=pulsar.InitialPosition.Earliest,
            )
            threads.append(
                threading.Thread(
                    target=consume_until,
                    args=(stop_consuming, consumer, cluster, history, received[cluster]),
                    daemon=True,
                )
            )
    for thread in threads:
        thread.start()

    producers = _Producers(setup, clients, history)
    seq = 0
    while not healed.is_set():
        producers.send_all(seq)
        seq += 1
        healed.wait(1.0 / setup.rate)
    history.add(Op("heal", time.monotonic()))
    finish_by = time.monotonic() + FINISH_SECONDS
    if not _wait(lambda: not producers.unanswered, history.changed, finish_by):
        print(f"{len(producers.unanswered)} sends never answered", file=sys.stderr)
    with history.lock:
        never = sorted(producers.unanswered)
    for name, number in never:
        cluster = producers.cluster_of[name]
        history.add(Op("send", time.monotonic(), name, number, "unknown", consumer=cluster))
    for cluster in clients:
        if _wait(partial(_has_all, producers.acked, received[cluster]), history.changed, finish_by):
            history.add(Op("caught_up", time.monotonic(), consumer=cluster))
        else:
            print(f"the consumers of {cluster} did not catch up", file=sys.stderr)
    stop_consuming.set()
    for thread in threads:
        thread.join(5)
    _final_reads(setup, clients, history_path, finish_by)


if __name__ == "__main__":
    again = sys.argv[1] == "--read-again"
    args = sys.argv[2:] if again else sys.argv[1:]
    loaded, target = Setup.load(Path(args[0])), Path(args[1])
    if again:
        read_again(loaded, target)
    else:
        run(loaded, target)
