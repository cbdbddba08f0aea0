"""The byte-level walk over a batch's messages, compiled with mypyc where the
build can (see setup.py); batch_check.py decides what to do with its answer.

A batch is messages of [u32 metadata size][SingleMessageMetadata][payload],
payload_size in the metadata. The walk reads each metadata's fields straight
from the bytes, but it decides only the plain cases on its own: one-byte tags
of the fields the official clients write, varints of at most nine bytes,
strings that are valid UTF-8 (protobuf checks them), properties of only key
and value. Anything else (an unknown field, a group, a long varint, a
metadata that does not decode) stops the walk at that message and hands it
to protobuf's own parser, so what is accepted is exactly what protobuf
accepts.

Written for mypyc: plain loops over ``bytes`` indices and ``int`` locals, which
it turns into C; run as Python it is correct but no faster than the strided
check in batch_check.py, which is used then instead.
"""

from __future__ import annotations

from typing import Final

# setup.py sets this to the SHA-256 of this file in the copy it compiles:
# batch_check.py ignores a compiled module older than its source.
COMPILED_FROM: Final[str] = ""

# walk()'s status: every message walked; or the walk stopped at a message.
DONE: Final = 0
NEEDS_PARSE: Final = 1  # its metadata is for protobuf to decode
NO_SIZE_FIELD: Final = 2  # fewer than 4 bytes left for its size field
METADATA_PAST_END: Final = 3  # its metadata size runs past the payload
PAYLOAD_PAST_END: Final = 4  # its payload_size runs past the payload

_PROPERTIES: Final = 0x0A  # field 1, length-delimited (KeyValue)
_PARTITION_KEY: Final = 0x12  # field 2, length-delimited (string)
_PAYLOAD_SIZE: Final = 0x18  # field 3, varint (int32)
_ORDERING_KEY: Final = 0x3A  # field 7, length-delimited (bytes)
_SEQUENCE_ID: Final = 0x40  # field 8, varint (uint64)
_KV_KEY: Final = 0x0A  # KeyValue field 1 (string)
_KV_VALUE: Final = 0x12  # KeyValue field 2 (string)
# The varint fields besides payload_size: 8 sequence_id, 5 event_time,
# 4 compacted_out, 6 partition_key_b64_encoded, 9 null_value, 10 null_partition_key.
_VARINT_FIELDS: Final = (0x40, 0x28, 0x20, 0x30, 0x48, 0x50)


def walk(data: bytes, count: int, index: int, offset: int) -> tuple[int, int, int]:
    """Walk messages ``index`` .. ``count - 1`` from ``offset``.

    Returns ``(status, index, offset)``: DONE with the offset after the last
    message, or the status of the message at ``index`` starting at ``offset``.
    """
    end = len(data)
    while index < count:
        if end - offset < 4:
            return NO_SIZE_FIELD, index, offset
        start = offset + 4
        high = (data[offset] << 24) | (data[offset + 1] << 16)
        meta_end = start + (high | (data[offset + 2] << 8) | data[offset + 3])
        if meta_end > end:
            return METADATA_PAST_END, index, offset
        # The official clients' shape, read here without a call: payload_size
        # in one byte, then nothing or a sequence_id (any other: _payload_size).
        size = -1
        if meta_end - start >= 2 and data[start] == _PAYLOAD_SIZE and data[start + 1] < 0x80:
            pos = start + 2
            if pos == meta_end:
                size = data[start + 1]
            elif data[pos] == _SEQUENCE_ID:
                pos += 1
                limit = pos + 8  # the varint's last byte within nine
                while pos < meta_end and pos < limit and data[pos] >= 0x80:
                    pos += 1
                if pos + 1 == meta_end and data[pos] < 0x80:
                    size = data[start + 1]
        if size < 0:
            size = _payload_size(data, start, meta_end)
            if size < 0:
                return NEEDS_PARSE, index, offset
        if meta_end + size > end:
            return PAYLOAD_PAST_END, index, offset
        offset = meta_end + size
        index += 1
    return DONE, index, offset


def _payload_size(data: bytes, pos: int, end: int) -> int:
    """payload_size of the plain metadata in data[pos:end], or -1 when it is
    not plain (protobuf decides then)."""
    size = -1
    while pos < end:
        tag = data[pos]
        pos += 1
        if tag == _PAYLOAD_SIZE:
            value, pos = varint(data, pos, end, 9)
            if value < 0:
                return -1
            # An int32: protobuf keeps the low 32 bits; negative is not plain.
            value &= 0xFFFFFFFF
            if value >= 0x80000000:
                return -1
            size = value
        elif tag in _VARINT_FIELDS:
            value, pos = varint(data, pos, end, 9)
            if value < 0:
                return -1
        elif tag in (_PARTITION_KEY, _ORDERING_KEY, _PROPERTIES):
            length, pos = varint(data, pos, end, 4)
            field_end = pos + length
            if length < 0 or field_end > end:
                return -1
            if tag == _PARTITION_KEY:
                if not utf8(data, pos, field_end):
                    return -1
            elif tag == _PROPERTIES and key_value_fields(data, pos, field_end) < 0:
                return -1
            pos = field_end
        else:
            return -1
    return size


def key_value_fields(data: bytes, pos: int, end: int) -> int:
    """Which fields data[pos:end] holds if it is a KeyValue of key and value
    fields only (bit 1: key, bit 2: value), or -1 when it is not one."""
    seen = 0
    while pos < end:
        tag = data[pos]
        if tag == _KV_KEY:
            seen |= 1
        elif tag == _KV_VALUE:
            seen |= 2
        else:
            return -1
        length, pos = varint(data, pos + 1, end, 4)
        field_end = pos + length
        if length < 0 or field_end > end or not utf8(data, pos, field_end):
            return -1
        pos = field_end
    return seen


def varint(data: bytes, pos: int, end: int, max_bytes: int) -> tuple[int, int]:
    """(value, position after it) of the varint at data[pos]; value -1 when it
    runs past ``end`` or past ``max_bytes`` bytes."""
    value = 0
    shift = 0
    limit = pos + max_bytes
    while pos < end and pos < limit:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
    return -1, pos


def _ascii(data: bytes, pos: int, end: int) -> bool:
    while pos < end:
        if data[pos] >= 0x80:
            return False
        pos += 1
    return True


def utf8(data: bytes, pos: int, end: int) -> bool:
    """Whether data[pos:end] is valid UTF-8, as protobuf requires of a string."""
    if _ascii(data, pos, end):
        return True
    try:
        data[pos:end].decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
