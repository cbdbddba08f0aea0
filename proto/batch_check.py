"""Refusing a SEND whose batch lies about itself, before it is stored.

A consumer's client trusts num_messages_in_batch when it splits an entry; a
count the payload cannot hold (one million messages in 100 bytes) crashes
some clients. So on publish:

- any batch: the count must be at least 1 and at most what the payload can
  hold, at 6 bytes a message at the least (a 4-byte size, then metadata
  with its required payload_size: a tag and a one-byte varint); a compressed
  payload is measured by its declared uncompressed_size;
- an uncompressed, unencrypted batch: its single-message headers are walked,
  and exactly that many well-formed messages must end at the payload's end;
- the SEND's num_messages is between 1 and the metadata's count.

The walk runs for every batch published. Where setup.py compiled
batch_walk.py with mypyc (README "Compiled hot path"), that module walks
every message's metadata in C, tens of nanoseconds a message whatever the
shape, and hands the few it does not decide to protobuf's parser. In pure
Python a loop turn per message costs more than the rest of a publish, so
the walk there reads the official clients' common metadata shape (payload_size,
then sequence_id, nothing else) straight from the bytes and parses any other
shape in full. In their batches that shape repeats at a fixed stride (equal
payloads, sequence ids of one varint length), so after each message of that
shape the run of messages framed like it is checked a byte position at a
time over strided slices: a few slices per run instead of a loop turn per
message.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from google.protobuf.message import DecodeError

from magnetar.proto import batch_walk, compiled, pulsar_api_pb2 as pb

MIN_MESSAGE_BYTES = 6
_U32 = struct.Struct(">I")
_PAYLOAD_SIZE_TAG = 0x18  # field 3, varint
_SEQUENCE_ID_TAG = 0x40  # field 8, varint
Walk = Callable[[bytes, int, int, int], tuple[int, int, int]]


# True where the build compiled batch_walk from its current source.
COMPILED_WALK = compiled.is_current(batch_walk)


def source_walk() -> Walk:
    """batch_walk's walk run from its source, even where the build compiled
    it (the tests and `bench shapes` hold the two side by side)."""
    walk: Walk = compiled.from_source(batch_walk).walk
    return walk


def send_problem(
    metadata: pb.MessageMetadata, data: bytes, payload_start: int, send_num_messages: int
) -> str | None:
    """Why a SEND must be refused, or None when its batch framing is sound.

    The (possibly compressed) batch is data[payload_start:]; it is not copied."""
    return counts_problem(
        metadata.num_messages_in_batch if metadata.HasField("num_messages_in_batch") else None,
        metadata.HasField("num_chunks_from_msg"),
        metadata.compression,
        metadata.uncompressed_size,
        len(metadata.encryption_keys) > 0,
        data,
        payload_start,
        send_num_messages,
    )


def counts_problem(
    batch_count: int | None,
    chunked: bool,
    compression: int,
    uncompressed_size: int,
    encrypted: bool,
    data: bytes,
    payload_start: int,
    send_num_messages: int,
) -> str | None:
    """send_problem from the metadata fields it reads (``batch_count`` None:
    num_messages_in_batch unset), as a SEND read without protobuf has them."""
    if batch_count is None:
        if send_num_messages != 1 and not chunked:
            return f"SEND says {send_num_messages} messages for a message that is not a batch"
        return None
    count = batch_count
    if count < 1:
        return f"batch of {count} messages"
    compressed = compression != pb.NONE
    size = uncompressed_size if compressed else len(data) - payload_start
    if count > size // MIN_MESSAGE_BYTES:
        return f"batch claims {count} messages in {size} bytes"
    if not 1 <= send_num_messages <= count:
        return f"SEND says {send_num_messages} messages for a batch of {count}"
    if compressed or encrypted:
        return None
    return batch_framing_problem(data, count, payload_start)


def batch_framing_problem(payload: bytes, count: int, offset: int = 0) -> str | None:
    """Whether payload[offset:] is exactly `count` well-formed batch messages."""
    if COMPILED_WALK:
        return walked_problem(payload, count, offset)
    return strided_problem(payload, count, offset)


def walked_problem(
    payload: bytes, count: int, offset: int = 0, walk: Walk = batch_walk.walk
) -> str | None:
    """batch_framing_problem by batch_walk's walk (``walk``: tests pass the
    uncompiled one), protobuf parsing the messages it hands back."""
    end = len(payload)
    index = 0
    while True:
        status, index, offset = walk(payload, count, index, offset)
        if status == batch_walk.DONE:
            if offset != end:
                return f"batch of {count} messages has {end - offset} trailing bytes"
            return None
        if status == batch_walk.NO_SIZE_FIELD:
            return f"batch truncated: message {index} of {count} has no size field"
        meta_size = _U32.unpack_from(payload, offset)[0]
        start = offset + 4
        if status == batch_walk.METADATA_PAST_END:
            return f"batch message {index}: metadata size {meta_size} runs past the payload"
        size = _parsed_payload_size(payload[start : start + meta_size])
        if size < 0:
            return f"batch message {index}: undecodable metadata or no payload_size"
        offset = start + meta_size + size
        if offset > end:
            return f"batch message {index}: payload size {size} runs past the payload"
        index += 1


def strided_problem(payload: bytes, count: int, offset: int = 0) -> str | None:
    """batch_framing_problem in pure Python: strided runs of the common shape."""
    end = len(payload)
    unpack = _U32.unpack_from
    index = 0
    window = _RUN_WINDOW
    skip = 0
    while index < count:
        if end - offset < 4:
            return f"batch truncated: message {index} of {count} has no size field"
        meta_size = unpack(payload, offset)[0]
        start = offset + 4
        meta_end = start + meta_size
        if meta_end > end:
            return f"batch message {index}: metadata size {meta_size} runs past the payload"
        # Inline for speed: payload_size < 128, then nothing or a sequence_id.
        size = -1
        if 2 <= meta_size <= 13 and payload[start] == _PAYLOAD_SIZE_TAG:
            size = payload[start + 1]
            if size >= 0x80 or (
                meta_size > 2
                and not (
                    payload[start + 2] == _SEQUENCE_ID_TAG
                    and meta_size > 3
                    and payload[meta_end - 1] < 0x80
                    and (meta_size == 4 or min(payload[start + 3 : meta_end - 1]) >= 0x80)
                )
            ):
                size = -1
        common = size >= 0
        if not common:
            size = _common_shape_size(payload, start, meta_end)
            common = size >= 0
        if not common:
            size = _parsed_payload_size(payload[start:meta_end])
            if size < 0:
                return f"batch message {index}: undecodable metadata or no payload_size"
        first = offset
        offset = meta_end + size
        if offset > end:
            return f"batch message {index}: payload size {size} runs past the payload"
        index += 1
        if skip:
            skip -= 1
        elif common:
            stride = offset - first
            limit = min(count - index, (end - offset) // stride, window)
            if limit >= _MIN_RUN:
                run = _same_frame_run(payload, first, stride, meta_end, limit)
                index += run
                offset += run * stride
                # A short run: the shape varies here, so walk on one by one
                # for a while (each try costs slices of `window` elements).
                window = window * 4 if run == limit else _RUN_WINDOW
                skip = _SKIP_AFTER_SHORT_RUN if run < _MIN_RUN else 0
    if offset != end:
        return f"batch of {count} messages has {end - offset} trailing bytes"
    return None


def _same_frame_run(data: bytes, first: int, stride: int, meta_end: int, limit: int) -> int:
    """How many of the `limit` messages after the one at `first` (known good,
    common shape) are framed exactly like it: the same size field, tags and
    payload_size, a sequence_id varint of the same length."""
    # The bytes before the sequence_id varint: size field, payload_size tag
    # and varint, sequence_id tag (when there is one).
    pos = first + 5
    while data[pos] >= 0x80:
        pos += 1
    fixed_end = pos + 2 if pos + 1 < meta_end else pos + 1
    # The size field's low byte first: it differs first when the shape does.
    positions = [first + 3, first + 2, first + 1, first, *range(first + 4, meta_end)]
    run = limit
    for pos in positions:
        # Byte `pos` of each of the next `run` messages.
        column = data[pos + stride : pos + stride * run + 1 : stride]
        if pos < fixed_end:
            rest = column.lstrip(_SINGLE[data[pos]])
        else:
            table = _CONTINUES if pos < meta_end - 1 else _ENDS
            rest = column.translate(table).lstrip(b"\x01")
        run -= len(rest)
        if not run:
            break
    return run


_SINGLE = [bytes([b]) for b in range(256)]
# Varint bytes mapped to 1 where they fit: inside (continuation bit set) or last.
_CONTINUES = bytes(1 if b >= 0x80 else 0 for b in range(256))
_ENDS = bytes(1 if b < 0x80 else 0 for b in range(256))
# Runs are tried over at most this many messages at first, four times more
# after each whole run; after a run shorter than _MIN_RUN the next
# _SKIP_AFTER_SHORT_RUN messages are walked one by one.
_RUN_WINDOW = 256
_MIN_RUN = 8
_SKIP_AFTER_SHORT_RUN = 32


def _common_shape_size(data: bytes, pos: int, end: int) -> int:
    """payload_size when the metadata is exactly payload_size, optionally
    followed by sequence_id (what the official clients write for a plain
    message); -1 for any other shape, which is then parsed in full."""
    if pos >= end or data[pos] != _PAYLOAD_SIZE_TAG:
        return -1
    size, pos = batch_walk.varint(data, pos + 1, end, 5)  # 32 bits
    if size < 0 or pos == end:
        return size
    if data[pos] != _SEQUENCE_ID_TAG:
        return -1
    sequence_id, pos = batch_walk.varint(data, pos + 1, end, 10)  # 64 bits
    return size if sequence_id >= 0 and pos == end else -1


def _parsed_payload_size(raw: bytes) -> int:
    try:
        meta = pb.SingleMessageMetadata.FromString(raw)
    except (DecodeError, RuntimeError, ValueError):
        return -1
    if not meta.HasField("payload_size") or meta.payload_size < 0:
        return -1
    return meta.payload_size
