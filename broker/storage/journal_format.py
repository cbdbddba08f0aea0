"""On-disk format of the broker's journal: pure functions over bytes, no I/O.

A journal file is a sequence of groups, one per managed ledger per write::

    magic      u32   0x4C4E524A ("JRNL")
    crc32c     u32   over the rest of the header (from ledger_id to the name)
    ledger_id  u64
    first      u64   entry id of the group's first record
    count      u32   records in the group
    length     u32   bytes of the records
    name_len   u16   the managed ledger's name (utf-8) follows
    name       name_len bytes
    records    length bytes: the ledger file's own records (records.py)

The records are the very buffers written to the ledger file, so journaling
costs no encoding per entry; each carries its own checksum. Zeros (the
preallocated tail) never parse: the magic is not zero.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

from crc32c import crc32c

from magnetar.broker.storage.records import scan

MAGIC = 0x4C4E524A
_HEAD = struct.Struct("<II")
_BODY = struct.Struct("<QQIIH")
GROUP_HEADER_SIZE = _HEAD.size + _BODY.size


def encode_group_header(name: bytes, ledger_id: int, first: int, count: int, length: int) -> bytes:
    body = _BODY.pack(ledger_id, first, count, length, len(name)) + name
    return _HEAD.pack(MAGIC, crc32c(body)) + body


@dataclass(frozen=True, slots=True)
class JournalGroup:
    """One group read back: where its records sit in the buffer."""

    name: str
    ledger_id: int
    first: int
    count: int
    start: int
    end: int


def read_groups(buf: bytes | memoryview) -> Iterator[JournalGroup]:
    """Every whole, valid group of a journal file, in order; stops at the
    first short, torn or zero header, or records that fail their checksums."""
    mv = memoryview(buf)
    n = len(mv)
    off = 0
    while off + GROUP_HEADER_SIZE <= n:
        magic, crc = _HEAD.unpack_from(mv, off)
        if magic != MAGIC:
            return
        ledger_id, first, count, length, name_len = _BODY.unpack_from(mv, off + _HEAD.size)
        body_end = off + GROUP_HEADER_SIZE + name_len
        if body_end > n or crc32c(mv[off + _HEAD.size : body_end]) != crc:
            return
        end = body_end + length
        if end > n:
            return
        result = scan(mv[body_end:end], verify=True)
        if result.corrupt or result.valid_end != length or len(result.offsets) - 1 != count:
            return
        name = bytes(mv[off + GROUP_HEADER_SIZE : body_end]).decode()
        yield JournalGroup(name, ledger_id, first, count, body_end, end)
        off = end
