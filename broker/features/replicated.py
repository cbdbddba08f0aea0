"""Names and sequence ids of geo-replication (issue 45), shared by the
replicator that sends and the topic that receives.

A replicator of the local cluster `a` reads the durable cursor
`pulsar.repl.<remote>` and publishes on the remote as the producer
`pulsar.repl.a` (Pulsar's names). Each entry goes with a sequence id made
from its position on the source topic, and the stored copy carries it as its
metadata's sequence id: position order is send order, so the receiving
topic deduplicates the replicator like any producer, and after a crash it
rebuilds the replicator's highest id from the stored entries themselves
(their `replicated_from` names the replicator).
"""

from __future__ import annotations

from magnetar.broker.storage.api import Position

PREFIX = "pulsar.repl."
_ENTRY_BITS = 32
_ENTRY_MASK = (1 << _ENTRY_BITS) - 1


def is_replication_name(name: str) -> bool:
    """A replicator's producer name or a replication cursor's name."""
    return name.startswith(PREFIX)


def cursor_name(remote_cluster: str) -> str:
    """The durable cursor a topic's replicator to `remote_cluster` reads."""
    return PREFIX + remote_cluster


def producer_name(local_cluster: str) -> str:
    """The name the replicator from `local_cluster` publishes under."""
    return PREFIX + local_cluster


def sequence_id(position: Position) -> int:
    """A source entry's sequence id: ledger id in the high 32 bits, entry id
    in the low 32 (unsigned 64 bits, as the wire field; ledger and entry ids
    stay far below 2**32)."""
    ledger_id, entry_id = position
    if not (0 <= ledger_id <= _ENTRY_MASK and 0 <= entry_id <= _ENTRY_MASK):
        raise ValueError(f"position {position} does not fit a replication sequence id")
    return (ledger_id << _ENTRY_BITS) | entry_id


def position_of(sequence: int) -> Position:
    """The source position a replicated sequence id stands for."""
    return Position(sequence >> _ENTRY_BITS, sequence & _ENTRY_MASK)
