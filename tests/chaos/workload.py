"""The fault runs' workload, run inside the client namespace:
``python -m tests.chaos.workload SERVICE_URL ADMIN_URLS HISTORY [TOPICS] [RATE]``
(``--read-again`` first: only the final reads, see `read_again`).

One producer per topic (deduplication on in the brokers, send timeout 0,
no batching: the client retries every send until it is answered) and one
consumer per topic acknowledging every message; every operation is
recorded with its outcome (see checker.py). On SIGUSR1 (the controller has
healed every fault) it stops sending, waits for every send's answer,
records when the consumers have received every acknowledged send, reads
each topic back from the start and records each topic's sealed ledgers (the
fences new owners set). The history file gets one JSON op a line as they
happen; every wait at the end is bounded, so even a cluster that stopped
serving (a safety mechanism switched off) ends with a history to check.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pulsar

from tests.chaos.checker import Op

# Everything after healing (answers, catch-up, final reads) ends within this;
# the controller kills a workload that takes longer (run.py).
FINISH_SECONDS = 240.0
ROTATE_SECONDS = 2.0
KEEP_EPOCHS = 4
_LOGGER = logging.getLogger("chaos.workload")
_LOGGER.setLevel(logging.ERROR)


class History:
    """The ops, each written to the history file as it happens: a run that
    hangs or is killed still leaves what it saw for the checker."""

    def __init__(self, path: Path) -> None:
        self.ops: list[Op] = []
        self.lock = threading.Lock()
        # Notified when sends are answered or messages received (the waits
        # after healing).
        self.changed = threading.Condition(self.lock)
        self._out = path.open("a", buffering=1)

    def add(self, op: Op) -> None:
        with self.lock:
            self.ops.append(op)
            self._out.write(op.line())

    def close(self) -> None:
        with self.lock:
            self._out.close()


def keep_everything(admin_urls: list[str]) -> None:
    """Unlimited retention, so the final read sees acknowledged messages too."""
    body = json.dumps({"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}).encode()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for url in admin_urls:
            request = urllib.request.Request(
                f"{url}/admin/v2/namespaces/public/default/retention",
                data=body,
                method="POST",
                headers={"Content-Type": "application/json"},
            )
            try:
                with urllib.request.urlopen(request, timeout=5) as answer:
                    if answer.status == 204:
                        return
            except OSError:
                continue
        time.sleep(0.5)
    raise TimeoutError("no broker took the retention policy")


def _decode(data: bytes) -> tuple[str, int]:
    producer, _, seq = data.decode().partition(":")
    return producer, int(seq)


def consume_until(
    stop: threading.Event,
    consumer: Any,
    label: str,
    history: History,
    received: set[tuple[str, int]],
) -> None:
    """Receive until `stop`: each message recorded (its consumer `label`),
    added to `received` (waiters told) and acknowledged; errors of a
    consumer that is reconnecting are waited out."""
    while not stop.is_set():
        try:
            msg = consumer.receive(200)
        except pulsar.Timeout:
            continue
        except Exception:
            time.sleep(0.1)
            continue
        producer, seq = _decode(msg.data())
        mid = msg.message_id()
        history.add(Op("receive", time.monotonic(), producer, seq, "", mid.ledger_id(),
                       mid.entry_id(), consumer=label))  # fmt: skip
        with history.changed:
            received.add((producer, seq))
            history.changed.notify_all()
        with contextlib.suppress(Exception):
            consumer.acknowledge(msg)


def read_back(client: Any, name: str, history: History, deadline: float) -> None:
    """The final read of a topic from the start; a topic no broker serves in
    time is recorded as unreadable (the checker flags it)."""
    failure: Exception | None = None
    while True:
        if time.monotonic() > deadline:
            history.add(Op("unreadable", time.monotonic(), name))
            print(f"final read of {name} failed: {failure!r}", file=sys.stderr)
            return
        try:
            reader = client.create_reader(name, pulsar.MessageId.earliest)
            break
        except Exception as exc:
            failure = exc
    try:
        while reader.has_message_available():
            msg = reader.read_next(10_000)
            producer, seq = _decode(msg.data())
            mid = msg.message_id()
            history.add(Op("final", time.monotonic(), producer, seq, "", mid.ledger_id(),
                           mid.entry_id()))  # fmt: skip
    except Exception as exc:  # a partial read: what it missed shows as lost
        history.add(Op("unreadable", time.monotonic(), name))
        print(f"final read of {name} broke off: {exc!r}", file=sys.stderr)
    with contextlib.suppress(Exception):
        reader.close()


def record_fences(admin_urls: list[str], name: str, history: History) -> None:
    """Each sealed ledger's entry count, from the owner's internal stats: a
    new owner seals the ledger it took over at what the file held, so a
    receipt at or past that count names an entry beyond the fence. The
    newest ledger is still open and has no fence."""
    path = name.replace("persistent://", "persistent/")
    for url in admin_urls:
        try:
            with urllib.request.urlopen(f"{url}/admin/v2/{path}/internalStats", timeout=10) as got:
                stats = json.load(got)
        except (OSError, ValueError):
            continue
        for ledger in stats.get("ledgers", [])[:-1]:
            history.add(Op("fence", time.monotonic(), name, -1, "", ledger["ledgerId"],
                           ledger["entries"]))  # fmt: skip
        return
    print(f"no broker gave the internal stats of {name}", file=sys.stderr)


def run(service_url: str, admin_urls: list[str], out: Path, topics: int, rate: float) -> None:
    healed = threading.Event()
    signal.signal(signal.SIGUSR1, lambda *_: healed.set())
    keep_everything(admin_urls)
    history = History(out)
    client = pulsar.Client(
        service_url, operation_timeout_seconds=30, connection_timeout_ms=3000, logger=_LOGGER
    )
    names = topic_names(topics)
    consumers = [
        client.subscribe(name, "chaos", consumer_type=pulsar.ConsumerType.Exclusive)
        for name in names
    ]
    # Producers are replaced every ROTATE_SECONDS by new ones on a new client
    # (new connections, new lookups), so that while an owner is paused or cut
    # off, a new owner takes writes from new producers while the old ones'
    # sends wait in the old owner's socket: the split the fence must settle.
    epochs: list[tuple[Any, list[Any], list[str]]] = []
    # Clients (and producers) of epochs that failed to start, kept referenced
    # for good. One left to the garbage collector is destroyed with the GIL
    # held (the binding releases it around its blocking calls, not in a
    # destructor), and its C++ shutdown takes locks that the client's own
    # threads may hold while waiting for the GIL to run a callback or log.
    # A workload froze whole (every callback, every consumer) right after
    # "epoch 15 not started" in a `make test` run; this is the likeliest
    # cause (not reproduced alone). The process ends with os._exit, so
    # nothing is left behind.
    stranded: list[tuple[Any, list[Any]]] = []

    def new_epoch(number: int) -> tuple[Any, list[Any], list[str]]:
        fresh = pulsar.Client(
            service_url, operation_timeout_seconds=30, connection_timeout_ms=3000, logger=_LOGGER
        )
        labels = [f"p{i}e{number}" for i in range(topics)]
        made: list[Any] = []
        try:
            for name, label in zip(names, labels, strict=True):
                made.append(
                    fresh.create_producer(
                        name,
                        producer_name=label,
                        send_timeout_millis=0,
                        batching_enabled=False,
                        block_if_queue_full=True,
                    )
                )
        except Exception:
            stranded.append((fresh, made))
            raise
        return fresh, made, labels

    epochs.append(new_epoch(0))
    received: set[tuple[str, int]] = set()
    stop_consuming = threading.Event()

    readers = [
        threading.Thread(
            target=consume_until,
            args=(stop_consuming, consumer, "c", history, received),
            daemon=True,
        )
        for consumer in consumers
    ]
    for thread in readers:
        thread.start()

    acked: set[tuple[str, int]] = set()
    unanswered: set[tuple[str, int]] = set()

    def answered(producer: str, seq: int) -> Any:
        def done(result: Any, mid: Any) -> None:
            ok = result == pulsar.Result.Ok
            position = (mid.ledger_id(), mid.entry_id()) if ok else (-1, -1)
            history.add(Op("send", time.monotonic(), producer, seq, "ok" if ok else "fail",
                           *position))  # fmt: skip
            with history.changed:
                unanswered.discard((producer, seq))
                if ok:
                    acked.add((producer, seq))
                history.changed.notify_all()

        return done

    def rotate() -> None:
        number = 1
        while not healed.wait(ROTATE_SECONDS):
            try:
                made = new_epoch(number)
            except Exception as exc:
                print(f"epoch {number} not started: {exc!r}", file=sys.stderr)
                continue
            with history.lock:
                epochs.append(made)
            number += 1
            if len(epochs) > KEEP_EPOCHS:
                with history.lock:
                    old = epochs[-KEEP_EPOCHS - 1]
                if old[0] is not None:
                    for producer in old[1]:
                        producer.flush()
                        producer.close()
                    old[0].close()
                    with history.lock:
                        epochs[epochs.index(old)] = (None, [], old[2])

    rotator = threading.Thread(target=rotate, daemon=True)
    rotator.start()
    seq = 0
    # Each producer's sequence ids, given explicitly. The official client
    # (C++ core) numbers messages itself from the broker's last sequence id
    # whenever it (re)connects before its first receipt, even with messages
    # pending: after a broker lost them (killed before they were stored),
    # the next messages reuse pending ids and deduplication drops them.
    # Explicit ids keep the producer's numbering its own.
    next_id: dict[str, int] = {}
    interval = 1.0 / rate
    while not healed.is_set():
        with history.lock:
            _, producers, labels = epochs[-1]
        for producer, label in zip(producers, labels, strict=True):
            payload = f"{label}:{seq}".encode()
            sequence_id = next_id.get(label, 0)
            next_id[label] = sequence_id + 1
            with history.lock:
                unanswered.add((label, seq))
            try:
                producer.send_async(payload, answered(label, seq), sequence_id=sequence_id)
            except Exception as exc:
                with history.lock:
                    unanswered.discard((label, seq))
                history.add(Op("send", time.monotonic(), label, seq, "fail"))
                print(f"send_async failed: {exc!r}", file=sys.stderr)
        seq += 1
        healed.wait(interval)
    history.add(Op("heal", time.monotonic()))
    finish_by = time.monotonic() + FINISH_SECONDS
    rotator.join(10)  # it may hang closing an old epoch; it is a daemon
    # Every send answered (send timeout 0: the clients resend until then),
    # within a bound; what is still open at the end is recorded as unknown.
    if not _wait(lambda: not unanswered, history.changed, finish_by):
        print(f"{len(unanswered)} sends never answered", file=sys.stderr)
    with history.lock:
        never = sorted(unanswered)
    for label, number in never:
        history.add(Op("send", time.monotonic(), label, number, "unknown"))
    if _wait(lambda: acked <= received, history.changed, finish_by):
        history.add(Op("caught_up", time.monotonic()))
    else:
        print("consumers did not catch up", file=sys.stderr)
    stop_consuming.set()
    for thread in readers:
        thread.join(5)
    _read_all(client, admin_urls, names, history, finish_by)


def topic_names(count: int) -> list[str]:
    return [f"persistent://public/default/chaos-{i}" for i in range(count)]


def read_again(service_url: str, admin_urls: list[str], out: Path, topics: int) -> None:
    """Only the final reads and fences, into a history of their own: the
    controller's second look when the workload could not read everything
    back (it restarted the brokers first, see run.py)."""
    client = pulsar.Client(
        service_url, operation_timeout_seconds=30, connection_timeout_ms=3000, logger=_LOGGER
    )
    finish_by = time.monotonic() + FINISH_SECONDS
    _read_all(client, admin_urls, topic_names(topics), History(out), finish_by)


def _read_all(
    client: Any, admin_urls: list[str], names: list[str], history: History, deadline: float
) -> None:
    for name in names:
        read_back(client, name, history, deadline)
        record_fences(admin_urls, name, history)
    history.close()
    # Closing clients with sends still open could wait forever; the history
    # is written, so the process ends here.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _wait(done: Callable[[], bool], changed: threading.Condition, deadline: float) -> bool:
    with changed:
        return changed.wait_for(done, max(0.0, deadline - time.monotonic()))


if __name__ == "__main__":
    again = sys.argv[1] == "--read-again"
    args = sys.argv[2:] if again else sys.argv[1:]
    url, admins, target = args[0], args[1].split(","), Path(args[2])
    count = int(args[3]) if len(args) > 3 else 3
    if again:
        read_again(url, admins, target, count)
    else:
        run(url, admins, target, count, float(args[4]) if len(args) > 4 else 20.0)
