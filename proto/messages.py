"""Message metadata helpers and the batch payload format.

A batch entry's (decompressed) payload is a run of messages, each

    [u32 size][SingleMessageMetadata][payload of SingleMessageMetadata.payload_size]

and MessageMetadata.num_messages_in_batch says how many there are. The field's
presence, not its value, marks an entry as a batch (WIRE "Batch payload").
Compression covers the whole run; decompressing is the client's job, so these
helpers only see uncompressed bytes.
"""

from __future__ import annotations

import base64
import binascii
import struct
from collections.abc import Iterable, Mapping

from google.protobuf.message import DecodeError

from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.errors import ProtocolError

# The sticky key of messages that have neither ordering key nor partition key
# (SEM-4.4); Pulsar's brokers use these very bytes, so slots agree with theirs.
NON_KEY = b"NONE_KEY"

_U32 = struct.Struct(">I")

AnyMetadata = pb.MessageMetadata | pb.SingleMessageMetadata


def is_batch(metadata: pb.MessageMetadata) -> bool:
    """Whether the entry's payload is in batch format."""
    return metadata.HasField("num_messages_in_batch")


def message_count(metadata: pb.MessageMetadata) -> int:
    """How many messages an entry holds (permits and backlog count these)."""
    return metadata.num_messages_in_batch if is_batch(metadata) else 1


def is_chunk(metadata: pb.MessageMetadata) -> bool:
    """Whether the entry is one chunk of a larger message (SEM-8.2)."""
    return metadata.HasField("chunk_id") and metadata.num_chunks_from_msg > 1


def publish_time(metadata: pb.MessageMetadata) -> int:
    """Publish time in milliseconds since the epoch, as the producer stamped it."""
    return metadata.publish_time


def event_time(metadata: AnyMetadata) -> int | None:
    """The application's event time in ms, or None; 0 on the wire means unset."""
    return metadata.event_time or None


def deliver_at_time(metadata: pb.MessageMetadata) -> int | None:
    """When a delayed message becomes deliverable (ms), or None (SEM-8.1)."""
    return metadata.deliver_at_time if metadata.HasField("deliver_at_time") else None


def properties(metadata: AnyMetadata) -> dict[str, str]:
    """A message's properties as a dict (a later duplicate key wins)."""
    return {kv.key: kv.value for kv in metadata.properties}


def key_values(props: Mapping[str, str]) -> list[pb.KeyValue]:
    """KeyValue messages for a properties dict, sorted for stable bytes."""
    return [pb.KeyValue(key=k, value=v) for k, v in sorted(props.items())]


def partition_key(metadata: AnyMetadata) -> str | None:
    """The partition key as the producer set it (still base64 when so flagged)."""
    if metadata.HasField("partition_key") and not metadata.null_partition_key:
        return metadata.partition_key
    return None


def ordering_key(metadata: AnyMetadata) -> bytes | None:
    return metadata.ordering_key if metadata.HasField("ordering_key") else None


def sticky_key(metadata: AnyMetadata) -> bytes:
    """The key Key_Shared dispatch hashes (SEM-4.4).

    The ordering key when set, else the partition key's bytes (base64-decoded
    when `partition_key_b64_encoded`), else NON_KEY. For a batch entry pass the
    entry's MessageMetadata: key-based batching puts the shared key there.
    """
    if metadata.HasField("ordering_key"):
        return metadata.ordering_key
    key = partition_key(metadata)
    if key is None:
        return NON_KEY
    if metadata.partition_key_b64_encoded:
        try:
            return base64.b64decode(key, validate=True)
        except (binascii.Error, ValueError):
            # Pulsar's broker would fail to decode too; hashing the text keeps
            # the message deliverable and its placement stable.
            return key.encode()
    return key.encode()


def single_metadata(
    payload: bytes,
    *,
    props: Mapping[str, str] | None = None,
    partition_key: str | None = None,
    ordering_key: bytes | None = None,
    event_time: int | None = None,
    sequence_id: int | None = None,
    null_value: bool = False,
) -> pb.SingleMessageMetadata:
    """A SingleMessageMetadata for one message of a batch."""
    meta = pb.SingleMessageMetadata(payload_size=len(payload))
    if props:
        meta.properties.extend(key_values(props))
    if partition_key is not None:
        meta.partition_key = partition_key
    if ordering_key is not None:
        meta.ordering_key = ordering_key
    if event_time:
        meta.event_time = event_time
    if sequence_id is not None:
        meta.sequence_id = sequence_id
    if null_value:
        meta.null_value = True
    return meta


def build_batch(messages: Iterable[tuple[pb.SingleMessageMetadata, bytes]]) -> bytes:
    """The uncompressed batch payload for (metadata, payload) pairs.

    Each metadata's payload_size is set from its payload (on a copy when it is
    missing or wrong, so callers' objects are never changed).
    """
    parts: list[bytes] = []
    for meta, payload in messages:
        if not meta.HasField("payload_size") or meta.payload_size != len(payload):
            fixed = pb.SingleMessageMetadata()
            fixed.CopyFrom(meta)
            fixed.payload_size = len(payload)
            meta = fixed
        raw = meta.SerializeToString()
        parts.append(_U32.pack(len(raw)))
        parts.append(raw)
        parts.append(payload)
    return b"".join(parts)


def split_batch(payload: bytes, num_messages: int) -> list[tuple[pb.SingleMessageMetadata, bytes]]:
    """Split an uncompressed batch payload into its (metadata, payload) pairs.

    Raises ProtocolError when the bytes do not hold exactly `num_messages`
    well-formed messages.
    """
    if num_messages < 0:
        raise ProtocolError(f"negative message count {num_messages} in batch")
    data = memoryview(payload)
    end = len(data)
    offset = 0
    out: list[tuple[pb.SingleMessageMetadata, bytes]] = []
    for index in range(num_messages):
        if end - offset < 4:
            raise ProtocolError(
                f"batch truncated: message {index} of {num_messages} has no size field"
            )
        meta_size = _U32.unpack_from(data, offset)[0]
        offset += 4
        if meta_size > end - offset:
            raise ProtocolError(
                f"batch message {index}: metadata size {meta_size} exceeds "
                f"the {end - offset} bytes left"
            )
        try:
            meta = pb.SingleMessageMetadata.FromString(bytes(data[offset : offset + meta_size]))
        except (DecodeError, RuntimeError, ValueError) as exc:
            raise ProtocolError(f"batch message {index}: undecodable metadata: {exc}") from exc
        offset += meta_size
        # upb does not enforce `required` fields when parsing, so check here.
        if not meta.HasField("payload_size"):
            raise ProtocolError(f"batch message {index}: metadata without payload_size")
        size = meta.payload_size
        if size < 0 or size > end - offset:
            raise ProtocolError(
                f"batch message {index}: payload size {size} does not fit "
                f"the {end - offset} bytes left"
            )
        out.append((meta, bytes(data[offset : offset + size])))
        offset += size
    if offset != end:
        raise ProtocolError(f"batch of {num_messages} messages has {end - offset} trailing bytes")
    return out


def entry_messages(
    metadata: pb.MessageMetadata, payload: bytes
) -> list[tuple[pb.SingleMessageMetadata | None, bytes]]:
    """The messages of an uncompressed entry: split when a batch, else the one payload."""
    if not is_batch(metadata):
        return [(None, payload)]
    return list(split_batch(payload, metadata.num_messages_in_batch))
