"""What the broker reads back from stored entries' metadata.

Entries are stored as the SEND's bytes; these helpers parse the metadata
where a query needs it (last message id, seek by publish time, Key_Shared
keys and delayed delivery on the dispatch path).
"""

from __future__ import annotations

import struct

from magnetar.broker.features.markers import has_marker_tag, marker_type
from magnetar.broker.storage.api import Entry, ManagedLedger, Position
from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.errors import ProtocolError
from magnetar.proto.frames import MAGIC_CHECKSUM, Payload
from magnetar.proto.hashes import murmur3_32
from magnetar.proto.messages import is_batch

_U32 = struct.Struct(">I")
_CHECKSUM_MAGIC = MAGIC_CHECKSUM.to_bytes(2, "big")
# MessageMetadata.deliver_at_time is field 19, a varint: its tag bytes.
_DELIVER_AT_TAG = b"\x98\x01"
# How many marker entries GetLastMessageId passes over at the end.
_MAX_TRAILING_MARKERS = 64


async def last_entry_id(ledger: ManagedLedger) -> tuple[Position, int]:
    """The newest message's position and its last batch index (-1: not a
    batch). Marker entries (issue 45.4) are no messages: a reader waiting
    for one at the end would wait for ever, so trailing ones are passed over
    (a few at most: markers follow messages)."""
    position = ledger.last_confirmed_position
    for _ in range(_MAX_TRAILING_MARKERS):
        if position.entry_id < 0:
            return position, -1
        entries = await ledger.read_positions([position])
        if not entries:
            return position, -1
        entry = entries[0]
        if not (has_marker_tag(entry.data) and marker_type(entry.data)):
            break
        position = ledger.previous_position(position)
    else:
        return position, -1
    if entry.num_messages > 1:
        return position, entry.num_messages - 1
    try:
        batched = is_batch(Payload.parse(entry.data, verify_checksum=False).metadata)
    except ProtocolError:
        batched = False
    return position, 0 if batched else -1


def publish_time(entry: Entry) -> int:
    """The entry's publish time in ms (a batch's is its first message's)."""
    return int(Payload.parse(entry.data, verify_checksum=False).metadata.publish_time)


def deliver_at_time(data: bytes) -> int:
    """An entry's deliver_at_time in ms, 0 when it has none.

    On the Shared dispatch path for every entry read, so it skips the full
    metadata parse unless the field's tag bytes occur in the metadata (a
    false hit only costs that parse).
    """
    offset = 6 if data[:2] == _CHECKSUM_MAGIC else 0
    if len(data) < offset + 4:
        return 0
    size = _U32.unpack_from(data, offset)[0]
    start = offset + 4
    if data.find(_DELIVER_AT_TAG, start, start + size) < 0:
        return 0
    try:
        metadata = pb.MessageMetadata.FromString(data[start : start + size])
    except Exception:  # undecodable metadata is never stored (checked on publish)
        return 0
    return int(metadata.deliver_at_time) if metadata.HasField("deliver_at_time") else 0


# Pulsar's sticky key for a message without ordering or partition key, so a
# keyless message lands on the same consumer as it would there.
NON_KEY = b"NONE_KEY"


def sticky_key(metadata: pb.MessageMetadata) -> str | bytes:
    """The key Key_Shared routes by (SEM-4.4): ordering key, else partition
    key, else NON_KEY. A batch's metadata carries its key (key-based batching).
    An empty key that is set counts, as in Pulsar."""
    # Plain reads first, HasField only for an empty value: this runs once for
    # every entry a Key_Shared subscription reads.
    ordering_key = metadata.ordering_key
    if ordering_key or metadata.HasField("ordering_key"):
        return ordering_key
    partition_key = metadata.partition_key
    if partition_key or metadata.HasField("partition_key"):
        return partition_key
    return NON_KEY


def key_hash_and_deliver_at(data: bytes) -> tuple[int, int]:
    """An entry's sticky key hash (unsigned Murmur3 32; a str key hashes as
    its UTF-8 bytes) and deliver_at_time (0: none), from one metadata parse."""
    offset = 6 if data[:2] == _CHECKSUM_MAGIC else 0
    start = offset + 4
    try:
        size = _U32.unpack_from(data, offset)[0]
        metadata = pb.MessageMetadata.FromString(data[start : start + size])
    except Exception:  # undecodable metadata is never stored (checked on publish)
        return murmur3_32(NON_KEY), 0
    return murmur3_32(sticky_key(metadata)), metadata.deliver_at_time
