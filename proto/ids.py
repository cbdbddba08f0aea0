"""MessageId: a message's address, ordered as Pulsar orders it.

On the wire ledger and entry ids are uint64; in Python they are signed 64-bit
so that "earliest" is (-1, -1) (all ones on the wire) and compares below every
real id. `serialize()` gives the same bytes as the official client's
`MessageId.serialize()`: a MessageIdData protobuf.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from google.protobuf.message import DecodeError

from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.errors import ProtocolError
from magnetar.proto.fastpath import varint

INT64_MAX = (1 << 63) - 1
_U64 = 1 << 64


def to_signed64(value: int) -> int:
    """A wire uint64 as the signed value Pulsar's Java code sees."""
    return value - _U64 if value > INT64_MAX else value


def to_unsigned64(value: int) -> int:
    return value + _U64 if value < 0 else value


@dataclass(frozen=True, slots=True, order=False)
class MessageId:
    """(ledger, entry[, partition, batch index]); partition and batch index -1 when unset."""

    ledger_id: int
    entry_id: int
    partition: int = -1
    batch_index: int = -1
    batch_size: int = field(default=0, compare=False)

    earliest: ClassVar[MessageId]
    latest: ClassVar[MessageId]

    def _key(self) -> tuple[int, int, int, int]:
        return (self.ledger_id, self.entry_id, self.partition, self.batch_index)

    def __lt__(self, other: MessageId) -> bool:
        return self._key() < other._key()

    def __le__(self, other: MessageId) -> bool:
        return self._key() <= other._key()

    def __gt__(self, other: MessageId) -> bool:
        return self._key() > other._key()

    def __ge__(self, other: MessageId) -> bool:
        return self._key() >= other._key()

    @property
    def is_batch(self) -> bool:
        return self.batch_index >= 0

    def position(self) -> tuple[int, int, int]:
        """Where the message is in its topic (the partition is not part of it)."""
        return (self.ledger_id, self.entry_id, self.batch_index)

    def entry_key(self) -> tuple[int, int]:
        """The stored entry this id points into (its batch index dropped)."""
        return (self.ledger_id, self.entry_id)

    def to_proto(self, out: pb.MessageIdData | None = None) -> pb.MessageIdData:
        data = out if out is not None else pb.MessageIdData()
        data.ledgerId = to_unsigned64(self.ledger_id)
        data.entryId = to_unsigned64(self.entry_id)
        if self.partition != -1:
            data.partition = self.partition
        if self.batch_index != -1:
            data.batch_index = self.batch_index
        if self.batch_size > 0:
            data.batch_size = self.batch_size
        return data

    @classmethod
    def from_proto(cls, data: pb.MessageIdData, partition: int | None = None) -> MessageId:
        return cls(
            to_signed64(data.ledgerId),
            to_signed64(data.entryId),
            data.partition if partition is None else partition,
            data.batch_index,
            data.batch_size,
        )

    def serialize(self) -> bytes:
        return self.to_proto().SerializeToString()

    @classmethod
    def deserialize(cls, raw: bytes) -> MessageId:
        try:
            data = pb.MessageIdData.FromString(raw)
        except DecodeError as exc:
            raise ProtocolError(f"not a serialized message id: {exc}") from exc
        return cls.from_proto(data)

    def __str__(self) -> str:
        return f"({self.ledger_id},{self.entry_id},{self.partition},{self.batch_index})"


def serialize_many(ids: Sequence[MessageId]) -> list[bytes]:
    """serialize() of each id, at about half its cost for what a reader of
    many messages has: whole entries of one ledger and partition, whose
    MessageIdData bytes differ only in the entry id (a fixed head and tail
    around its varint). Any other id is serialized as usual."""
    if not ids:
        return []
    ledger, partition = ids[0].ledger_id, ids[0].partition
    if ledger < 0 or partition < -1:
        return [msg_id.serialize() for msg_id in ids]
    head = b"\x08" + varint(ledger) + b"\x10"  # ledgerId = 1, entryId = 2
    tail = b"" if partition == -1 else b"\x18" + varint(partition)  # partition = 3
    return [
        head + varint(msg_id.entry_id) + tail
        if msg_id.ledger_id == ledger
        and msg_id.partition == partition
        and msg_id.batch_index == -1
        and msg_id.batch_size == 0
        and msg_id.entry_id >= 0
        else msg_id.serialize()
        for msg_id in ids
    ]


MessageId.earliest = MessageId(-1, -1)
MessageId.latest = MessageId(INT64_MAX, INT64_MAX)


def read_after(msg_id: MessageId, start: MessageId, inclusive: bool) -> bool:
    """Whether a message read from `start` (a reader's start, a seek's
    target) is wanted: after it, or at it when `inclusive`. A start without
    batch index stands for its whole entry; partitions are not compared."""
    if start.batch_index < 0:
        entry, start_entry = msg_id.entry_key(), start.entry_key()
        return entry >= start_entry if inclusive else entry > start_entry
    here, there = msg_id.position(), start.position()
    return here >= there if inclusive else here > there
