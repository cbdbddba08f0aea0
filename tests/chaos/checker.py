"""The history checker of the fault runs.

A history is a list of recorded operations (`Op`), each with its outcome:

- ``send``: producer P sent its sequence number S (deduplication on, send
  timeout 0, so the client retries until it gets an answer); ``ok`` with the
  receipt's position (ledger, entry; -1, -1 when the broker recognised a
  resend as a duplicate of a stored message), or ``fail`` (an error answer), or
  ``unknown`` (the run ended before an answer).
- ``receive``: a consumer got (P, S) at a position; ``ack``: it acknowledged it.
- ``final``: after healing, a reader from the earliest position read the
  whole topic: what is durably stored, in order (``unreadable``: it could
  not, no broker served the topic).
- ``heal``: the time every fault was undone; ``caught_up``: the time the
  consumers had received every acknowledged send.
- ``fence``: after healing, a sealed ledger of a topic and the entry count
  it was sealed with (``ledger``, ``entry``), from the owner's internal stats.
- ``unfinished``: the controller's mark that the workload had to be killed;
  its history ends where it stopped.

What "exactly once" means here (after failover a consumer may be given a
message again, because an acknowledgement the old owner took may not have
been durable): **every acknowledged send is stored exactly once, and is
delivered to consumers at least once; deliveries after the first of the
same (P, S) are redeliveries and are counted, not flagged, as long as they
name the same position.** So the anomalies are:

- ``lost``: a send answered ok is not in the final read;
- ``duplicate``: a (P, S) stored twice in the final read (dedup broken);
- ``order``: a producer's sequence numbers not increasing in the final read;
- ``phantom``: a message received or stored that was never sent;
- ``two-owners``: one position acknowledged (receipt) for two different
  messages, or a receipt whose position holds another message;
- ``beyond-fence``: a receipt naming an entry at or past its ledger's fence
  (the entry count the new owner sealed it with);
- ``undelivered``: an acknowledged send no consumer ever received;
- ``slow-recovery``: consumers caught up later than the bound after healing;
- ``unreadable``: no broker served a topic for the final read after healing;
- ``unfinished``: the workload did not end in time (the cluster stopped
  answering), so its history is cut short.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

Position = tuple[int, int]


@dataclass(frozen=True, slots=True)
class Op:
    kind: str  # send | receive | ack | final | fence | heal | caught_up | unreadable | unfinished
    time: float
    producer: str = ""
    seq: int = -1
    result: str = ""  # send: ok | fail | unknown
    ledger: int = -1
    entry: int = -1
    consumer: str = ""

    @property
    def position(self) -> Position:
        return (self.ledger, self.entry)

    @property
    def key(self) -> tuple[str, int]:
        return (self.producer, self.seq)

    def line(self) -> str:
        """The op as one line of a history file."""
        return json.dumps(asdict(self)) + "\n"


@dataclass(slots=True)
class Report:
    anomalies: list[tuple[str, str]] = field(default_factory=list)
    sends: int = 0
    acknowledged: int = 0
    received: int = 0
    redelivered: int = 0
    stored: int = 0
    recovery_seconds: float | None = None

    @property
    def ok(self) -> bool:
        return not self.anomalies

    def kinds(self) -> Counter[str]:
        return Counter(kind for kind, _ in self.anomalies)

    def flag(self, kind: str, detail: str) -> None:
        self.anomalies.append((kind, detail))


def check(
    history: Iterable[Op],
    fences: Mapping[int, int] | None = None,
    recovery_bound: float = 60.0,
) -> Report:
    """Every anomaly of the history; `fences` maps ledger id -> sealed entry
    count (default: the history's fence ops)."""
    ops = list(history)
    if fences is None:
        fences = {op.ledger: op.entry for op in ops if op.kind == "fence"}
    report = Report()
    sent = {op.key for op in ops if op.kind == "send"}
    acked = [op for op in ops if op.kind == "send" and op.result == "ok"]
    report.sends = sum(1 for op in ops if op.kind == "send")
    report.acknowledged = len(acked)
    final = [op for op in ops if op.kind == "final"]
    report.stored = len(final)
    stored_at: dict[Position, tuple[str, int]] = {op.position: op.key for op in final}
    stored_keys = Counter(op.key for op in final)

    for key, times in stored_keys.items():
        if key not in sent:
            report.flag("phantom", f"stored but never sent: {key}")
        elif times > 1:
            report.flag("duplicate", f"stored {times} times: {key}")
    last_seq: dict[str, int] = {}
    for op in final:
        before = last_seq.get(op.producer)
        if before is not None and op.seq <= before:
            report.flag("order", f"{op.producer}: seq {op.seq} stored after {before}")
        last_seq[op.producer] = op.seq if before is None else max(before, op.seq)

    receipt_for: dict[Position, tuple[str, int]] = {}
    for op in acked:
        if op.ledger < 0:
            # A resend the broker recognised as a duplicate: confirmed without a
            # position (Pulsar answers -1:-1); only "stored once" applies.
            if op.key not in stored_keys:
                report.flag("lost", f"confirmed as a duplicate, not stored: {op.key}")
            continue
        other = receipt_for.setdefault(op.position, op.key)
        if other != op.key:
            report.flag("two-owners", f"{op.position} confirmed for {other} and {op.key}")
        fence = fences.get(op.ledger)
        if fence is not None and op.entry >= fence:
            report.flag("beyond-fence", f"{op.key} confirmed at {op.position}, fence {fence}")
        elif op.key not in stored_keys:
            report.flag("lost", f"confirmed at {op.position}, not stored: {op.key}")
        elif stored_at.get(op.position) not in (None, op.key):
            report.flag("two-owners", f"{op.key} confirmed at {op.position}, which holds "
                        f"{stored_at[op.position]}")  # fmt: skip

    first_seen: dict[tuple[str, int], Position] = {}
    for op in ops:
        if op.kind != "receive":
            continue
        report.received += 1
        if op.key not in sent:
            report.flag("phantom", f"received but never sent: {op.key}")
            continue
        seen = first_seen.setdefault(op.key, op.position)
        if seen != op.position:
            report.flag("duplicate", f"{op.key} delivered at {seen} and at {op.position}")
    report.redelivered = report.received - len(first_seen)
    for op in acked:
        if op.key not in first_seen:
            report.flag("undelivered", f"acknowledged but never received: {op.key}")

    for op in ops:
        if op.kind == "unreadable":
            report.flag("unreadable", f"no broker served {op.producer} for the final read")
        elif op.kind == "unfinished":
            report.flag("unfinished", "the workload was killed: its history is cut short")
    heals = [op.time for op in ops if op.kind == "heal"]
    caught = [op.time for op in ops if op.kind == "caught_up"]
    if heals:
        if not caught or caught[-1] < heals[-1]:
            report.flag("slow-recovery", "consumers never caught up after the last heal")
        else:
            report.recovery_seconds = caught[-1] - heals[-1]
            if report.recovery_seconds > recovery_bound:
                report.flag(
                    "slow-recovery", f"caught up {report.recovery_seconds:.1f}s after healing"
                )
    return report


def load(path: Path) -> list[Op]:
    """A history file; a last line cut short (the workload was killed while
    writing it) is left out."""
    ops = []
    for line in path.read_text().splitlines(keepends=True):
        if line.endswith("\n"):
            ops.append(Op(**json.loads(line)))
    return ops
