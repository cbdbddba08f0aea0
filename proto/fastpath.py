"""Hand-encoded frames for the hottest commands: the broker's SEND_RECEIPT and
MESSAGE, and the SEND of a geo-replicator's producer.

These run once per entry published, dispatched or replicated. Building a protobuf object
for each and serializing it cost more than writing the few varints directly,
so the bytes are put together here, field by field in field-number order,
exactly as protobuf serializes the same values (the tests compare both).
Everything else goes through `frames.encode_command`.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

_U32_PAIR = struct.Struct(">II")
# Frame size, command size and the receipt's fixed head with its body length.
_RECEIPT_PREFIX = struct.Struct(">II3s1s")
_MASK64 = (1 << 64) - 1
_ONE_BYTE = [bytes((value,)) for value in range(0x80)]

# BaseCommand: type (field 1, varint) then the body (field = type, length-delimited).
_SEND_RECEIPT_HEAD = b"\x08\x07\x3a"  # type SEND_RECEIPT (7), field 7
_MESSAGE_HEAD = b"\x08\x09\x4a"  # type MESSAGE (9), field 9
_SEND_HEAD = b"\x08\x06\x32"  # type SEND (6), field 6


def varint(value: int) -> bytes:
    """Protobuf varint; a negative value is its 64-bit two's complement (10 bytes)."""
    if 0 <= value < 0x80:
        return _ONE_BYTE[value]
    if value < 0:
        value &= _MASK64
    elif value < 0x4000:
        return bytes(((value & 0x7F) | 0x80, value >> 7))
    elif value < 0x200000:  # entry ids up to two million: three bytes
        return bytes(((value & 0x7F) | 0x80, (value >> 7 & 0x7F) | 0x80, value >> 14))
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _message_id(ledger_id: int, entry_id: int, partition: int) -> bytes:
    """MessageIdData: ledgerId (1), entryId (2), partition (3) when >= 0."""
    if partition >= 0:
        return b"\x08%b\x10%b\x18%b" % (varint(ledger_id), varint(entry_id), varint(partition))
    return b"\x08%b\x10%b" % (varint(ledger_id), varint(entry_id))


def send_receipt(
    producer_id: int,
    sequence_id: int,
    highest_sequence_id: int,
    ledger_id: int,
    entry_id: int,
    partition: int,
) -> bytes:
    """A SEND_RECEIPT frame; `highest_sequence_id` 0 is left out, as unset."""
    one = _ONE_BYTE
    mid = b"\x08%b\x10%b" % (
        one[ledger_id] if 0 <= ledger_id < 0x80 else varint(ledger_id),
        one[entry_id] if 0 <= entry_id < 0x80 else varint(entry_id),
    )
    if partition >= 0:
        mid += b"\x18" + varint(partition)
    body = b"\x08%b\x10%b\x1a%b%b" % (
        one[producer_id] if producer_id < 0x80 else varint(producer_id),
        one[sequence_id] if 0 <= sequence_id < 0x80 else varint(sequence_id),
        one[len(mid)],
        mid,
    )
    if highest_sequence_id:
        body += b"\x20" + varint(highest_sequence_id)
    size = len(body)
    # The body stays under 128 bytes (68 at most), so its length is one byte.
    return _RECEIPT_PREFIX.pack(size + 8, size + 4, _SEND_RECEIPT_HEAD, one[size]) + body


def message_parts(
    consumer_id: int,
    ledger_id: int,
    entry_id: int,
    partition: int,
    redelivery_count: int,
    ack_set: Sequence[int] | None,
    epoch: int | None,
    data: bytes,
) -> tuple[bytes, bytes]:
    """A MESSAGE frame around an entry's stored bytes, as (everything before
    the entry, the entry): a dispatch round joins all of its frames' parts
    once, so the entry bytes are copied once on their way to the socket."""
    mid = _message_id(ledger_id, entry_id, partition)
    body = b"\x08%b\x12%b%b" % (varint(consumer_id), varint(len(mid)), mid)
    if redelivery_count:
        body += b"\x18" + varint(redelivery_count)
    if ack_set:
        body += b"".join([b"\x20" + varint(word) for word in ack_set])
    if epoch is not None:
        body += b"\x28" + varint(epoch)
    command = b"%b%b%b" % (_MESSAGE_HEAD, varint(len(body)), body)
    return _U32_PAIR.pack(len(command) + 4 + len(data), len(command)) + command, data


def send_frame(
    producer_id: int, sequence_id: int, num_messages: int, highest_sequence_id: int, data: bytes
) -> bytes:
    """A SEND frame around a built payload section (checksum block, metadata,
    messages): CommandSend's producer_id (1), sequence_id (2), num_messages
    (3) and highest_sequence_id (6), each written (all four set)."""
    body = b"\x08%b\x10%b\x18%b\x30%b" % (
        varint(producer_id),
        varint(sequence_id),
        varint(num_messages),
        varint(highest_sequence_id),
    )
    command = _SEND_HEAD + varint(len(body)) + body
    return b"".join((_U32_PAIR.pack(len(command) + 4 + len(data), len(command)), command, data))
