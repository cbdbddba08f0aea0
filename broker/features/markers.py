"""Marker entries of replicated subscriptions (issue 45.4, Pulsar's
PulsarMarkers.proto): entries the broker writes into a topic, whose metadata
has `marker_type` set, and that no consumer ever receives.

MarkerType values and the field numbers of the marker messages are Pulsar's,
so a Pulsar cluster could read ours:

- SnapshotRequest (10): snapshot_id = 1, source_cluster = 2.
- SnapshotResponse (11): snapshot_id = 1, cluster = 2 (a ClusterMessageId).
- SubscriptionUpdate (13): subscription_name = 1, clusters = 2 (repeated).
- ClusterMessageId: cluster = 1, message_id = 2 (ledger_id = 1, entry_id = 2).

The few proto2 messages are encoded by hand here (varints and
length-delimited fields) rather than generated.

A durable subscription is replicated when its cursor carries the property
`pulsar.replicated.subscription` = 1 (Pulsar's name): it survives restarts
with the cursor.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from magnetar.broker.storage.api import LATEST, ManagedCursor, Position
from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.frames import MAGIC_CHECKSUM, Payload

SNAPSHOT_REQUEST = 10
SNAPSHOT_RESPONSE = 11
SNAPSHOT = 12
SUBSCRIPTION_UPDATE = 13

REPLICATED_PROPERTY = "pulsar.replicated.subscription"
# The producer name marker entries are stored under.
MARKER_PRODUCER = "pulsar.marker"

_U32 = struct.Struct(">I")
_CHECKSUM_MAGIC = MAGIC_CHECKSUM.to_bytes(2, "big")
# MessageMetadata.marker_type is field 20, a varint: its tag bytes.
_MARKER_TAG = b"\xa0\x01"


class MarkerError(ValueError):
    """A marker's payload does not decode."""


@dataclass(frozen=True, slots=True)
class SnapshotRequest:
    snapshot_id: str
    source_cluster: str


@dataclass(frozen=True, slots=True)
class SnapshotResponse:
    snapshot_id: str
    cluster: str
    position: Position


@dataclass(frozen=True, slots=True)
class SubscriptionUpdate:
    subscription: str
    positions: Mapping[str, Position] = field(default_factory=dict)


Marker = SnapshotRequest | SnapshotResponse | SubscriptionUpdate


# ------------------------------------------------------------ subscriptions


def is_replicated(cursor: ManagedCursor) -> bool:
    """Whether a durable subscription's state replicates to other clusters."""
    return cursor.properties.get(REPLICATED_PROPERTY, 0) == 1


def mark_replicated(cursor: ManagedCursor) -> None:
    """Flag the subscription as replicated, stored with the cursor."""
    if is_replicated(cursor):
        return
    properties = dict(cursor.properties)
    properties[REPLICATED_PROPERTY] = 1
    cursor.mark_delete(cursor.mark_delete_position, properties)


def unmark_replicated(cursor: ManagedCursor) -> None:
    """The subscription's state no longer replicates."""
    if not is_replicated(cursor):
        return
    properties = dict(cursor.properties)
    del properties[REPLICATED_PROPERTY]
    cursor.mark_delete(cursor.mark_delete_position, properties)


# ------------------------------------------------------------ entries


class MarkerHorizon:
    """The last of a topic's entries that may be a marker: dispatch looks
    for markers up to it only, so a topic that never had one pays nothing
    per entry. When the topic loads it is the last entry stored before
    (what earlier loads stored is not known); once a marker is stored while
    loaded (a snapshot written here, or a remote's replicator), every entry."""

    __slots__ = ("last",)

    def __init__(self, last: Position = LATEST) -> None:
        self.last = last

    def marker_stored(self) -> None:
        """Called in the loop turn that appends a marker: no read sees it first."""
        self.last = LATEST


def has_marker_tag(data: bytes) -> bool:
    """Whether an entry may be a marker: the tag of `marker_type` occurs in
    its metadata (a false hit only costs a full parse in `marker_type`).
    Cheap enough for every entry on the dispatch path."""
    offset = 6 if data[:2] == _CHECKSUM_MAGIC else 0
    if len(data) < offset + 4:
        return False
    size = _U32.unpack_from(data, offset)[0]
    start = offset + 4
    return data.find(_MARKER_TAG, start, start + size) >= 0


def marker_type(data: bytes) -> int:
    """An entry's marker type; 0 for a message."""
    if not has_marker_tag(data):
        return 0
    offset = 6 if data[:2] == _CHECKSUM_MAGIC else 0
    size = _U32.unpack_from(data, offset)[0]
    try:
        metadata = pb.MessageMetadata.FromString(data[offset + 4 : offset + 4 + size])
    except Exception:  # undecodable metadata is never stored (checked on publish)
        return 0
    return int(metadata.marker_type)


def marker_entry(marker: Marker, replicate_to: list[str]) -> bytes:
    """The stored bytes of a marker entry that replicates to `replicate_to`."""
    metadata = pb.MessageMetadata()
    metadata.producer_name = MARKER_PRODUCER
    metadata.sequence_id = 0
    metadata.publish_time = int(time.time() * 1000)
    metadata.marker_type = _type_of(marker)
    metadata.replicate_to.extend(replicate_to)
    return Payload.build(metadata, encode(marker)).data


def parse_entry(data: bytes) -> tuple[pb.MessageMetadata, Marker | None]:
    """An entry's metadata and its marker (None: a message, or a marker
    type this broker does not act on). Raises MarkerError or ProtocolError."""
    payload = Payload.parse(data, verify_checksum=False)
    metadata = payload.metadata
    kind = int(metadata.marker_type)
    if kind == 0:
        return metadata, None
    return metadata, decode(kind, bytes(payload.payload))


def _type_of(marker: Marker) -> int:
    if isinstance(marker, SnapshotRequest):
        return SNAPSHOT_REQUEST
    if isinstance(marker, SnapshotResponse):
        return SNAPSHOT_RESPONSE
    return SUBSCRIPTION_UPDATE


# ------------------------------------------------------------ the codec


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        bits = value & 0x7F
        value >>= 7
        if value:
            out.append(bits | 0x80)
        else:
            out.append(bits)
            return bytes(out)


def _uint(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value)


def _bytes(number: int, value: bytes) -> bytes:
    return _varint((number << 3) | 2) + _varint(len(value)) + value


def _cluster_id(cluster: str, position: Position) -> bytes:
    message_id = _uint(1, position.ledger_id) + _uint(2, position.entry_id)
    return _bytes(1, cluster.encode()) + _bytes(2, message_id)


def encode(marker: Marker) -> bytes:
    """A marker's payload, as Pulsar's PulsarMarkers messages."""
    if isinstance(marker, SnapshotRequest):
        return _bytes(1, marker.snapshot_id.encode()) + _bytes(2, marker.source_cluster.encode())
    if isinstance(marker, SnapshotResponse):
        cluster = _cluster_id(marker.cluster, marker.position)
        return _bytes(1, marker.snapshot_id.encode()) + _bytes(2, cluster)
    parts = [_bytes(1, marker.subscription.encode())]
    parts.extend(_bytes(2, _cluster_id(c, p)) for c, p in sorted(marker.positions.items()))
    return b"".join(parts)


def _fields(data: bytes) -> dict[int, list[int | bytes]]:
    """Field number -> its values (varints as ints, length-delimited as
    bytes); fixed-width fields are skipped."""
    found: dict[int, list[int | bytes]] = {}
    index, end = 0, len(data)

    def varint() -> int:
        nonlocal index
        value = shift = 0
        while True:
            if index >= end or shift > 63:
                raise MarkerError("truncated varint")
            byte = data[index]
            index += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    while index < end:
        key = varint()
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value = varint()
        elif wire == 2:
            size = varint()
            if index + size > end:
                raise MarkerError("truncated field")
            value, index = data[index : index + size], index + size
        elif wire in (1, 5):
            index += 8 if wire == 1 else 4
            continue
        else:
            raise MarkerError(f"unsupported wire type {wire}")
        found.setdefault(number, []).append(value)
    return found


def _text(found: dict[int, list[int | bytes]], number: int) -> str:
    values = found.get(number)
    if not values or not isinstance(values[-1], bytes):
        raise MarkerError(f"field {number} missing")
    return values[-1].decode()


def _number(found: dict[int, list[int | bytes]], number: int) -> int:
    values = found.get(number)
    if not values or not isinstance(values[-1], int):
        raise MarkerError(f"field {number} missing")
    return values[-1]


def _decode_cluster_id(data: bytes) -> tuple[str, Position]:
    found = _fields(data)
    raw = found.get(2)
    if not raw or not isinstance(raw[-1], bytes):
        raise MarkerError("cluster message id missing")
    message_id = _fields(raw[-1])
    return _text(found, 1), Position(_number(message_id, 1), _number(message_id, 2))


def decode(kind: int, data: bytes) -> Marker | None:
    """A marker's payload; None for a type this broker does not act on."""
    try:
        found = _fields(data)
        if kind == SNAPSHOT_REQUEST:
            source = _text(found, 2) if 2 in found else ""
            return SnapshotRequest(_text(found, 1), source)
        if kind == SNAPSHOT_RESPONSE:
            raw = found.get(2)
            if not raw or not isinstance(raw[-1], bytes):
                raise MarkerError("response without a cluster")
            cluster, position = _decode_cluster_id(raw[-1])
            return SnapshotResponse(_text(found, 1), cluster, position)
        if kind == SUBSCRIPTION_UPDATE:
            positions = dict(
                _decode_cluster_id(raw) for raw in found.get(2, []) if isinstance(raw, bytes)
            )
            return SubscriptionUpdate(_text(found, 1), positions)
    except UnicodeDecodeError as exc:
        raise MarkerError(f"bad string: {exc}") from exc
    return None
