"""SEND frames of the common shape read straight from the bytes, compiled with
mypyc where the build can (see setup.py); frames.py decides when to use it.

A SEND is a BaseCommand (type, then the CommandSend), the checksum block and
a MessageMetadata before the payload. protobuf's parser builds two message
objects per SEND and checks their required fields; here the same bytes are
read field by field, and what the broker needs of them lands in a SendHead.
Only the plain cases are decided: the fields the official clients write,
each with its declared wire type, varints of at most nine bytes, strings
that are ASCII or valid UTF-8, properties of a key and a value, a closed enum
value protobuf knows, counts that fit an int32. Anything else (an unknown
field, a transaction, encryption keys, a group, a truncated field, a missing
required field) makes scan_send return None, and the frame goes through
protobuf's parser and its checks as before: what this accepts is exactly
what protobuf accepts, and it refuses nothing itself.

Written for mypyc: plain loops over ``bytes`` indices and ``int`` locals.
Run as Python it is slower than protobuf, so frames.py uses it only when
compiled from the current source.
"""

from __future__ import annotations

from typing import Final

from magnetar.proto.batch_walk import key_value_fields, utf8, varint

# setup.py sets this to the SHA-256 of this file in the copy it compiles.
COMPILED_FROM: Final[str] = ""

# BaseCommand{type: SEND (6)}, then field 6 (send), length-delimited.
_SEND_PREFIX: Final = b"\x08\x06\x32"
_MAGIC_CHECKSUM_HI: Final = 0x0E
_MAGIC_CHECKSUM_LO: Final = 0x01
_INT32_MAX: Final = 0x7FFFFFFF
_UINT32_MAX: Final = 0xFFFFFFFF
_LAST_COMPRESSION: Final = 4  # SNAPPY: CompressionType is a closed enum

# MessageMetadata field numbers by their wire type (encryption_keys, 13, is
# left to protobuf). Strings are checked for UTF-8, bytes are not.
_META_STRINGS: Final = (1, 5, 6, 7, 14, 26)
_META_BYTES: Final = (15, 16, 18)
_META_VARINTS: Final = (2, 3, 8, 9, 11, 12, 17, 19, 20, 22, 23, 24, 25, 27, 28, 29, 30)
# The int32 counts the broker reads: num_messages_in_batch, num_chunks_from_msg, chunk_id.
_META_INT32S: Final = (11, 27, 29)


class SendHead:
    """What the broker reads of a SEND: the command's fields, the payload
    section as received (checksum block, metadata, messages) and the few
    metadata fields a publish looks at."""

    producer_id: int
    sequence_id: int
    num_messages: int
    highest_sequence_id: int
    # The payload section's bytes; its checksum (covering data[6:]).
    data: bytes
    checksum: int
    meta_size: int
    # MessageMetadata: num_messages_in_batch (-1 when unset),
    # compression, uncompressed_size, highest_sequence_id,
    # num_chunks_from_msg (0 when unset), chunk_id.
    batch_count: int
    compression: int
    uncompressed_size: int
    meta_highest_sequence_id: int
    num_chunks: int
    chunk_id: int

    def __init__(self) -> None:
        self.producer_id = 0
        self.sequence_id = 0
        self.num_messages = 1
        self.highest_sequence_id = 0
        self.data = b""
        self.checksum = 0
        self.meta_size = 0
        self.batch_count = -1
        self.compression = 0
        self.uncompressed_size = 0
        self.meta_highest_sequence_id = 0
        self.num_chunks = 0
        self.chunk_id = 0

    @property
    def name(self) -> str:
        return "SEND"

    @property
    def payload_start(self) -> int:
        """Where the messages start in ``data``."""
        return 10 + self.meta_size

    def __repr__(self) -> str:
        return (
            f"SendHead(producer {self.producer_id}, sequence {self.sequence_id}, "
            f"{len(self.data)} bytes)"
        )


def scan_send(buf: bytes, cmd_start: int, cmd_end: int, frame_end: int) -> SendHead | None:
    """The SendHead of the frame whose command is buf[cmd_start:cmd_end] and
    whose payload section runs to ``frame_end``, or None when protobuf must
    decide (not a SEND, or not of the plain shape)."""
    if cmd_end - cmd_start < 4:
        return None
    if buf[cmd_start] != 0x08 or buf[cmd_start + 1] != 0x06 or buf[cmd_start + 2] != 0x32:
        return None
    length, pos = varint(buf, cmd_start + 3, cmd_end, 4)
    if length < 0 or pos + length != cmd_end:
        return None
    head = SendHead()
    if not _read_send(buf, pos, cmd_end, head):
        return None
    # The payload section: checksum block, metadata size, metadata.
    if frame_end - cmd_end < 10:
        return None
    if buf[cmd_end] != _MAGIC_CHECKSUM_HI or buf[cmd_end + 1] != _MAGIC_CHECKSUM_LO:
        return None
    checksum = (buf[cmd_end + 2] << 24) | (buf[cmd_end + 3] << 16)
    checksum |= (buf[cmd_end + 4] << 8) | buf[cmd_end + 5]
    meta_size = (buf[cmd_end + 6] << 24) | (buf[cmd_end + 7] << 16)
    meta_size |= (buf[cmd_end + 8] << 8) | buf[cmd_end + 9]
    meta_start = cmd_end + 10
    if meta_size > frame_end - meta_start:
        return None
    if not _read_metadata(buf, meta_start, meta_start + meta_size, head):
        return None
    head.checksum = checksum
    head.meta_size = meta_size
    head.data = buf[cmd_end:frame_end]
    return head


def _read_send(buf: bytes, pos: int, end: int, head: SendHead) -> bool:
    """CommandSend's plain fields into ``head``; False when protobuf must decide."""
    seen = 0  # bit 1: producer_id, bit 2: sequence_id (both required)
    while pos < end:
        tag = buf[pos]
        pos += 1
        value, pos = varint(buf, pos, end, 9)
        if value < 0:
            return False
        if tag == 0x08:
            head.producer_id = value
            seen |= 1
        elif tag == 0x10:
            head.sequence_id = value
            seen |= 2
        elif tag == 0x18:
            if value > _INT32_MAX:
                return False
            head.num_messages = value
        elif tag == 0x30:
            head.highest_sequence_id = value
        elif tag != 0x38:  # is_chunk, a bool the broker reads from the metadata
            return False
    return seen == 3


def _read_metadata(buf: bytes, pos: int, end: int, head: SendHead) -> bool:
    """MessageMetadata's plain fields into ``head``; False when protobuf must decide."""
    seen = 0  # bits 1, 2, 4: producer_name, sequence_id, publish_time (required)
    while pos < end:
        key, pos = varint(buf, pos, end, 2)
        if key < 0:
            return False
        field = key >> 3
        wire = key & 7
        if wire == 0:
            if field not in _META_VARINTS:
                return False
            value, pos = varint(buf, pos, end, 9)
            if value < 0:
                return False
            if field in _META_INT32S and value > _INT32_MAX:
                return False  # protobuf would read a negative count
            if field == 2:
                seen |= 2
            elif field == 3:
                seen |= 4
            elif field == 8:
                if value > _LAST_COMPRESSION:
                    return False
                head.compression = value
            elif field == 9:
                if value > _UINT32_MAX:
                    return False
                head.uncompressed_size = value
            elif field == 11:
                head.batch_count = value
            elif field == 24:
                head.meta_highest_sequence_id = value
            elif field == 27:
                head.num_chunks = value
            elif field == 29:
                head.chunk_id = value
        elif wire == 2:
            length, pos = varint(buf, pos, end, 4)
            field_end = pos + length
            if length < 0 or field_end > end:
                return False
            if field == 4:
                if key_value_fields(buf, pos, field_end) != 3:  # both required
                    return False
            elif field in _META_STRINGS:
                if not utf8(buf, pos, field_end):
                    return False
                if field == 1:
                    seen |= 1
            elif field not in _META_BYTES:
                return False
            pos = field_end
        else:
            return False
    return seen == 7
