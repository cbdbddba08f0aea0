"""On-disk record format of ledger segment files: encode a group, scan, decode.

A ledger file is a sequence of records, one per entry::

    crc32c  u32   over everything after it (length, num_messages, data)
    length  u32   of data
    nmsgs   u32   messages in the entry
    data    length bytes

All little-endian. Entry ids are implicit: the n-th record is entry n. A file of
zeros never parses (the CRC of the zero header is not zero), so a torn or
preallocated tail stops the scan. Pure functions over bytes; no I/O here.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Sequence

from crc32c import crc32c

from magnetar.broker.storage.api import Entry, Position

HEADER = struct.Struct("<III")
HEADER_SIZE = HEADER.size
_LEN_NMSGS = struct.Struct("<II")
_CRC = struct.Struct("<I")
# The largest entry we accept (the length field is u32; Pulsar's limit is 5 MiB
# by default, the broker enforces its own).
MAX_ENTRY_SIZE = (1 << 31) - 1


def encode_group(datas: Sequence[bytes], nmsgs: Sequence[int]) -> list[bytes]:
    """The buffers of a group of records, in order, ready for one ``writev``."""
    if len(datas) != len(nmsgs):
        raise ValueError("one num_messages per entry")
    # map() keeps the per-record work in C: no Python frame per entry.
    lens = list(map(_LEN_NMSGS.pack, map(len, datas), nmsgs))
    crcs = list(map(_CRC.pack, map(crc32c, datas, map(crc32c, lens))))
    parts: list[bytes] = [b""] * (3 * len(datas))
    parts[0::3] = crcs
    parts[1::3] = lens
    parts[2::3] = datas
    return parts


def encode_record(data: bytes, nmsgs: int) -> list[bytes]:
    """``encode_group`` of one record."""
    head = _LEN_NMSGS.pack(len(data), nmsgs)
    return [_CRC.pack(crc32c(data, crc32c(head))), head, data]


class ScanResult:
    """Where each valid record starts, and where the valid part of the file ends.

    ``offsets`` has one more element than there are records: ``offsets[i]`` is
    where record i starts and ``offsets[-1]`` the end of the last valid record.
    ``cum_messages[i]`` is the number of messages in records ``[0, i)``.
    """

    __slots__ = ("corrupt", "cum_messages", "offsets")

    def __init__(self, offsets: array[int], cum_messages: array[int], corrupt: bool) -> None:
        self.offsets = offsets
        self.cum_messages = cum_messages
        # True when the scan stopped at a bad record (not just a short tail).
        self.corrupt = corrupt

    @property
    def valid_end(self) -> int:
        return self.offsets[-1]


def scan(
    buf: bytes | memoryview, verify: bool = True, base: int = 0, limit: int = -1
) -> ScanResult:
    """Walk the records of ``buf``; stop at the first short or bad record.

    ``base`` is added to every offset (the file position of ``buf[0]``); with
    ``limit`` >= 0 at most that many records are taken (a closed ledger's
    recorded entry count: what follows is never an entry).
    """
    mv = memoryview(buf)
    n = len(mv)
    offsets = array("q", [base])
    cum = array("q", [0])
    unpack = HEADER.unpack_from
    total = 0
    off = 0
    corrupt = False
    while off + HEADER_SIZE <= n and limit != 0:
        limit -= 1
        crc, length, nm = unpack(mv, off)
        end = off + HEADER_SIZE + length
        if end > n:
            break
        if verify and crc32c(mv[off + 4 : end]) != crc:
            corrupt = True
            break
        total += nm
        off = end
        offsets.append(base + off)
        cum.append(total)
    return ScanResult(offsets, cum, corrupt)


class CorruptEntryError(Exception):
    """A record failed its checksum on read (internal; mapped to StorageError)."""


def decode_range(
    buf: bytes,
    ledger_id: int,
    first_entry_id: int,
    offsets: Sequence[int],
    base: int,
) -> list[Entry]:
    """Entries of the records at ``offsets[0..k)`` (plus the end in ``offsets[k]``).

    ``buf`` holds the file bytes from file position ``base``; every record's CRC
    is checked. This is the catch-up read path: a plain loop measured faster
    than map() pipelines here, and tuple.__new__ skips the NamedTuple wrappers.
    """
    mv = memoryview(buf)
    out: list[Entry] = []
    append = out.append
    unpack = HEADER.unpack_from
    new = tuple.__new__
    entry_id = first_entry_id
    start = offsets[0] - base
    for i in range(1, len(offsets)):
        end = offsets[i] - base
        crc, _length, nm = unpack(mv, start)
        if crc32c(mv[start + 4 : end]) != crc:
            raise CorruptEntryError(f"checksum mismatch at {ledger_id}:{entry_id}")
        append(
            new(Entry, (new(Position, (ledger_id, entry_id)), buf[start + HEADER_SIZE : end], nm))
        )
        entry_id += 1
        start = end
    return out
