"""A geo-replicator's per-entry byte work without protobuf, compiled with
mypyc where the build can (see setup.py); callers use it only when compiled
from the current source (compiled.is_current), as they do send_scan.

A replicator reads each stored entry (checksum block, MessageMetadata, the
messages), decides whether it goes to the remote (not when it came from
another cluster: `replicated_from`, field 5, is set) and sends it with
`replicated_from` set to the local cluster and its sequence id (field 2, and
`highest_sequence_id`, field 24, when present) made the entry's position.
Parsing the metadata into a protobuf object, editing it and serializing it
again cost more than the rest of a send; here the fields are copied as
bytes, the three rewritten, in field-number order as protobuf writes them.
Only the plain shape is handled: anything else (no checksum block, a field
of a wire type MessageMetadata does not use, a truncated field,
`replicate_to`, a schema version) returns None and the caller goes through
protobuf as before.

`scan_receipt` reads a SEND_RECEIPT's producer and sequence ids the same way
(the replicator's producer gets one per entry sent).

Written for mypyc: plain loops over ``bytes`` indices and ``int`` locals.
"""

from __future__ import annotations

from typing import Final

from magnetar.proto.batch_walk import varint

# setup.py sets this to the SHA-256 of this file in the copy it compiles.
COMPILED_FROM: Final[str] = ""

_MAGIC_HI: Final = 0x0E
_MAGIC_LO: Final = 0x01
_U64_MAX: Final = (1 << 64) - 1
_PRODUCER_NAME: Final = 1
_SEQUENCE_ID: Final = 2
_REPLICATED_FROM: Final = 5
_REPLICATE_TO: Final = 7
_SCHEMA_VERSION: Final = 16
_HIGHEST_SEQUENCE_ID: Final = 24
_PUBLISH_TIME: Final = 3
# BaseCommand{type: SEND_RECEIPT (7)}, then field 7, length-delimited.
_RECEIPT_PREFIX: Final = b"\x08\x07\x3a"


class ReplicaHead:
    """What the replicator needs of a stored entry: whether it came from
    another cluster, its publish time, and (when it is to be sent) its
    metadata as rewritten and where its messages start."""

    replicated: bool
    publish_time: int
    metadata: bytes
    payload_start: int

    def __init__(self) -> None:
        self.replicated = False
        self.publish_time = 0
        self.metadata = b""
        self.payload_start = 0


class Receipt:
    """A SEND_RECEIPT's producer and sequence ids."""

    producer_id: int
    sequence_id: int

    def __init__(self, producer_id: int, sequence_id: int) -> None:
        self.producer_id = producer_id
        self.sequence_id = sequence_id


def _put_varint(out: bytearray, value: int) -> None:
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def scan_entry(data: bytes, cluster: bytes, sequence: int) -> ReplicaHead | None:
    """The entry `data` as the replicator of `cluster` sends it with
    `sequence` (0 <= sequence < 2**64), or None when protobuf must decide.
    A head whose `replicated` is set has no metadata: it is not sent."""
    size = len(data)
    if size < 10 or data[0] != _MAGIC_HI or data[1] != _MAGIC_LO:
        return None
    meta_size = (data[6] << 24) | (data[7] << 16) | (data[8] << 8) | data[9]
    pos = 10
    end = pos + meta_size
    if end > size:
        return None
    head = ReplicaHead()
    head.payload_start = end
    out = bytearray()
    placed = False  # replicated_from written
    required = 0  # bits 1, 2, 4: producer_name, sequence_id, publish_time
    while pos < end:
        start = pos
        key, pos = varint(data, pos, end, 2)
        if key < 0:
            return None
        key_end = pos
        field = key >> 3
        wire = key & 7
        if field > _REPLICATED_FROM and not placed:
            out.append((_REPLICATED_FROM << 3) | 2)
            _put_varint(out, len(cluster))
            out += cluster
            placed = True
        if wire == 0:
            value, pos = varint(data, pos, end, 10)
            if value < 0 or value > _U64_MAX:
                return None
            if field == _SEQUENCE_ID:
                required |= 2
                out.append(_SEQUENCE_ID << 3)
                _put_varint(out, sequence)
                continue
            if field == _HIGHEST_SEQUENCE_ID:
                out += data[start:key_end]
                _put_varint(out, sequence)
                continue
            if field == _PUBLISH_TIME:
                required |= 4
                head.publish_time = value
        elif wire == 2:
            length, pos = varint(data, pos, end, 5)
            if length < 0 or pos + length > end:
                return None
            pos += length
            if field == _PRODUCER_NAME:
                required |= 1
            elif field == _REPLICATED_FROM:
                if length == 0:
                    return None  # set but empty: protobuf reads it as unset
                head.replicated = True
                return head
            if field in (_REPLICATE_TO, _SCHEMA_VERSION):
                return None
        else:
            return None
        out += data[start:pos]
    if required != 7:
        return None
    if not placed:
        out.append((_REPLICATED_FROM << 3) | 2)
        _put_varint(out, len(cluster))
        out += cluster
    head.metadata = bytes(out)
    return head


def scan_receipt(buf: bytes, cmd_start: int, cmd_end: int, frame_end: int) -> Receipt | None:
    """The Receipt of the frame whose command is buf[cmd_start:cmd_end], or
    None when protobuf must decide (not a SEND_RECEIPT without a payload, or
    not of the plain shape: producer_id (1), sequence_id (2), message_id (3),
    highest_sequence_id (4))."""
    if frame_end != cmd_end or cmd_end - cmd_start < 8:
        return None
    if (
        buf[cmd_start] != _RECEIPT_PREFIX[0]
        or buf[cmd_start + 1] != _RECEIPT_PREFIX[1]
        or buf[cmd_start + 2] != _RECEIPT_PREFIX[2]
    ):
        return None
    length, pos = varint(buf, cmd_start + 3, cmd_end, 2)
    if length < 0 or pos + length != cmd_end:
        return None
    producer_id = -1
    sequence_id = -1
    while pos < cmd_end:
        tag = buf[pos]
        pos += 1
        if tag == 0x1A:
            length, pos = varint(buf, pos, cmd_end, 2)
            if length < 0 or pos + length > cmd_end:
                return None
            pos += length
            continue
        value, pos = varint(buf, pos, cmd_end, 10)
        if value < 0 or value > _U64_MAX:
            return None
        if tag == 0x08:
            producer_id = value
        elif tag == 0x10:
            sequence_id = value
        elif tag != 0x20:
            return None
    if producer_id < 0 or sequence_id < 0:
        return None
    return Receipt(producer_id, sequence_id)
