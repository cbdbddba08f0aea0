"""Extents: where a ledger's records sit in the object store (sans-I/O).

A ledger on object storage is the same stream of records as a ledger file
(records.py: crc, length, message count, data), cut into extents: each
round object holds one contiguous run of records for every ledger written in
that round. An extent says which entries, where they start in the ledger's
stream (its "virtual" offset, what a ledger file's offset would be), and
which object and byte range hold them; with the record sizes and message
counts the ledger's index is rebuilt at open without a read of the data.

Each extent is one metadata node, ``/storage/extents/<quoted ledger
name>/<ledger id>/<first entry id, 19 digits>@<object key>`` (names sort as
entry numbers), committed with the round under the ledger owner's fence.
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from urllib.parse import quote

from magnetar.broker.storage.records import HEADER_SIZE

EXTENTS_ROOT = "/storage/extents"
FENCES_ROOT = "/storage/fences"
_FORMAT = 1
# format, first entry, count, virtual start, object offset, key length
_HEAD = struct.Struct("<BQIQQH")


def extents_path(name: str) -> str:
    return f"{EXTENTS_ROOT}/{quote(name, safe='')}"


def ledger_extents_path(name: str, ledger_id: int) -> str:
    return f"{extents_path(name)}/{ledger_id}"


def extent_node(first_entry: int, key: str) -> str:
    """The node's name: the first entry (sorting as a number), then the
    object's key with '/' as '|', so that the collector learns every key a
    ledger names from a listing, without reading each extent."""
    return f"{first_entry:019d}@{key.replace('/', '|')}"


def key_of_node(node: str) -> str:
    """The object key an extent node's name carries."""
    _, sep, key = node.partition("@")
    if not sep:
        raise ExtentFormatError(f"extent node {node!r} names no object")
    return key.replace("|", "/")


def fence_path(name: str) -> str:
    """The owner's fence: a new owner bumps its version before it writes."""
    return f"{FENCES_ROOT}/{quote(name, safe='')}"


class ExtentFormatError(ValueError):
    """A stored extent does not parse (a bug or a foreign writer)."""


@dataclass(frozen=True, slots=True)
class Extent:
    """Entries ``first_entry .. first_entry + count`` of a ledger: records
    ``vstart ..`` of its stream, at ``offset`` in object ``key``."""

    first_entry: int
    vstart: int
    key: str
    offset: int
    # Record size (header included) and message count of each entry.
    sizes: array[int]
    nmsgs: array[int]

    # Derived once: ranges() and append() ask for them per extent.
    length: int = field(init=False)
    vend: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "length", sum(self.sizes))
        object.__setattr__(self, "vend", self.vstart + self.length)

    @property
    def count(self) -> int:
        return len(self.sizes)

    def encode(self) -> bytes:
        key = self.key.encode()
        head = _HEAD.pack(_FORMAT, self.first_entry, self.count, self.vstart, self.offset, len(key))
        return b"".join((head, key, _u32(self.sizes).tobytes(), _u32(self.nmsgs).tobytes()))

    @classmethod
    def decode(cls, raw: bytes) -> Extent:
        if len(raw) < _HEAD.size:
            raise ExtentFormatError(f"extent record of {len(raw)} bytes")
        fmt, first, count, vstart, offset, klen = _HEAD.unpack_from(raw)
        if fmt != _FORMAT:
            raise ExtentFormatError(f"extent format {fmt}, expected {_FORMAT}")
        at = _HEAD.size
        if len(raw) != at + klen + 8 * count:
            raise ExtentFormatError(f"extent record of {len(raw)} bytes for {count} entries")
        key = raw[at : at + klen].decode()
        at += klen
        sizes = array("I")
        sizes.frombytes(raw[at : at + 4 * count])
        nmsgs = array("I")
        nmsgs.frombytes(raw[at + 4 * count :])
        if any(s < HEADER_SIZE for s in sizes):
            raise ExtentFormatError("a record smaller than its header")
        return cls(first, vstart, key, offset, array("q", sizes), array("q", nmsgs))

    @classmethod
    def of_group(
        cls,
        first_entry: int,
        vstart: int,
        key: str,
        offset: int,
        ends: Sequence[int],
        nmsgs: Sequence[int],
    ) -> Extent:
        """The extent of one written group: ``ends`` are its records' virtual
        end offsets (as the writer computes them), ``vstart`` the first's start."""
        sizes = array("q", [ends[0] - vstart])
        sizes.extend(b - a for a, b in pairwise(ends))
        return cls(first_entry, vstart, key, offset, sizes, array("q", nmsgs))


def _u32(values: array[int]) -> array[int]:
    out = array("I", values)
    if out.itemsize != 4:  # pragma: no cover - every platform we run on
        raise RuntimeError("array('I') is not 32-bit here")
    return out


class ExtentMap:
    """A ledger's extents in stream order: the object ranges behind a range
    of its virtual offsets, found by bisection."""

    __slots__ = ("_entries", "_extents", "_starts")

    def __init__(self) -> None:
        self._extents: list[Extent] = []
        self._starts: list[int] = []
        self._entries = 0

    def __len__(self) -> int:
        return len(self._extents)

    def __iter__(self) -> Iterator[Extent]:
        return iter(self._extents)

    @property
    def end(self) -> int:
        return self._extents[-1].vend if self._extents else 0

    def append(self, extent: Extent) -> None:
        if extent.vstart != self.end or extent.first_entry != self._entries:
            raise ExtentFormatError(
                f"extent of entries {extent.first_entry}.. at {extent.vstart} does not follow "
                f"the previous ones ({self._entries} entries, {self.end} bytes)"
            )
        self._extents.append(extent)
        self._starts.append(extent.vstart)
        self._entries += extent.count

    def ranges(self, start: int, end: int) -> list[tuple[str, int, int]]:
        """(object key, offset, length) covering virtual bytes ``[start, end)``,
        in order; adjacent pieces of one object are merged."""
        if start < 0 or end > self.end or start > end:
            raise ValueError(f"range {start}..{end} outside 0..{self.end}")
        out: list[tuple[str, int, int]] = []
        i = max(0, bisect_right(self._starts, start) - 1)
        pos = start
        while pos < end:
            ext = self._extents[i]
            upto = min(end, ext.vend)
            off = ext.offset + (pos - ext.vstart)
            if out and out[-1][0] == ext.key and out[-1][1] + out[-1][2] == off:
                key, o, n = out[-1]
                out[-1] = (key, o, n + upto - pos)
            else:
                out.append((ext.key, off, upto - pos))
            pos = upto
            i += 1
        return out

    def index(self) -> tuple[array[int], array[int]]:
        """The ledger's offsets and cumulative message counts (segment.py's
        index arrays) rebuilt from the extents."""
        offsets = array("q", [0])
        cum = array("q", [0])
        end = 0
        total = 0
        for ext in self._extents:
            for size, nm in zip(ext.sizes, ext.nmsgs, strict=True):
                end += size
                total += nm
                offsets.append(end)
                cum.append(total)
        return offsets, cum
