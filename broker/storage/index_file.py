"""A sealed ledger's entry index on disk, mapped instead of held in memory.

While a ledger is written, its index (where each record starts, and the
messages before it) is two arrays that grow with it. Once the ledger is
sealed (rolled over, or closed with its topic) nothing is appended to it
again: the arrays go beside the ledger file as ``<id>.idx`` and are mapped
read-only, a bounded number at once. A lookup touches a page or two, which
the kernel brings in from the page cache and may drop again, so the broker's
memory no longer grows with the backlog it keeps; an entry id is still
found in O(1) and a byte bound by bisection, O(log n). Kafka keeps its offset index the same way.

Small ledgers (fewer than MIN_INDEXED_ENTRIES entries, which the segment size
bound makes ledgers of large entries) keep their arrays: a mapping costs a
page at least, and scanning such a file at open costs little.

Format, native byte order (asserted little-endian)::

    magic    4s   b"MGIX"
    version  u32  1
    entries  u64  n
    data_end u64  where the last record ends in the ledger file
    offsets  i64 * (n + 1)
    cum      i64 * (n + 1)   messages in records [0, i)

The file is written under a temporary name, synced and renamed: it exists
complete or not at all. Opening checks it against the ledger file (size, the
last record's checksum, no valid record after its end); any doubt and the
ledger file is scanned as before.
"""

from __future__ import annotations

import contextlib
import itertools
import mmap
import os
import struct
import sys
from array import array
from collections import OrderedDict
from collections.abc import Iterator
from typing import Union, overload

from crc32c import crc32c

from magnetar.broker.storage.records import HEADER, HEADER_SIZE
from magnetar.broker.storage.tail_index import TailIndex, part_path

MAGIC = b"MGIX"
VERSION = 1
FILE_HEADER = struct.Struct("<4sIQQ")
MIN_INDEXED_ENTRIES = 4096
# Index files mapped at once (Python's mmap holds a duplicate descriptor
# while mapped); a lookup in another one maps it again.
DEFAULT_MAPPED_INDEXES = 32
SUFFIX = ".idx"
TMP_SUFFIX = ".idx.tmp"
_PAIR = struct.Struct("<qq")
_ONE = struct.Struct("<q")

assert sys.byteorder == "little", "index files are written in native order"


def index_path(log_path: str) -> str:
    return log_path.removesuffix(".log") + SUFFIX


class _Mapping:
    """One index file mapped read-only, with views of its two arrays."""

    __slots__ = ("_map", "_view", "cum_messages", "offsets")

    def __init__(self, path: str, entries: int) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            self._map = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
        if len(self._map) != FILE_HEADER.size + 16 * (entries + 1):
            self._map.close()
            raise OSError(f"{path} changed size")
        self._view = memoryview(self._map)
        start = FILE_HEADER.size
        width = 8 * (entries + 1)
        self.offsets = self._view[start : start + width].cast("q")
        self.cum_messages = self._view[start + width : start + 2 * width].cast("q")

    def close(self) -> None:
        # No view leaves this module (slices are copied): unmapping is safe.
        for view in (self.offsets, self.cum_messages, self._view):
            view.release()
        self._map.close()


class IndexMaps:
    """The index files mapped now, the most recently used kept (loop thread
    only, like handles.OpenFiles)."""

    __slots__ = ("_capacity", "_lru")

    def __init__(self, capacity: int = DEFAULT_MAPPED_INDEXES) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self._capacity = capacity
        self._lru: OrderedDict[PagedIndex, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._lru)

    def used(self, index: PagedIndex) -> None:
        lru = self._lru
        if index in lru:
            lru.move_to_end(index)
            return
        lru[index] = None
        while len(lru) > self._capacity:
            victim, _ = lru.popitem(last=False)
            victim.unmap()

    def forget(self, index: PagedIndex) -> None:
        self._lru.pop(index, None)


class PagedIndex:
    """A sealed ledger's offsets or cumulative counts, read from its mapped
    index file: indexing and ``len`` as for an array (what bisect and the
    position math use); a slice is a copy (an array). Both start at 0 (the
    ledger file's first record, no messages before it)."""

    __slots__ = ("_column", "_entries", "_last", "_mapping", "_maps", "_path")

    def __init__(self, path: str, entries: int, last: int, column: int, maps: IndexMaps) -> None:
        self._path = path
        self._entries = entries
        self._last = last  # the value at [-1], known without a mapping
        self._column = column  # 0: offsets, 1: cumulative messages
        self._maps = maps
        self._mapping: _Mapping | None = None

    def __len__(self) -> int:
        return self._entries + 1

    @overload
    def __getitem__(self, i: int) -> int: ...
    @overload
    def __getitem__(self, i: slice) -> array[int]: ...
    def __getitem__(self, i: int | slice) -> int | array[int]:
        if type(i) is int:
            # Both ends without a mapping: whole-ledger counts and sizes
            # (backlog, stats) never map a file.
            if i == -1 or i == self._entries:
                return self._last
            if i == 0:
                return 0
        view = self._view()
        if isinstance(i, slice):
            return array("q", view[i])
        return int(view[i])

    @property
    def mapped(self) -> bool:
        return self._mapping is not None

    def _view(self) -> memoryview:
        mapping = self._mapping
        if mapping is None:
            mapping = self._mapping = _Mapping(self._path, self._entries)
        self._maps.used(self)
        return mapping.offsets if self._column == 0 else mapping.cum_messages

    def unmap(self) -> None:
        mapping, self._mapping = self._mapping, None
        if mapping is not None:
            mapping.close()

    def close(self) -> None:
        self._maps.forget(self)
        self.unmap()


IndexArray = Union["array[int]", PagedIndex, TailIndex]


def write_index(
    log_path: str, offsets: array[int] | TailIndex, cum: array[int] | TailIndex
) -> None:
    """Store a sealed ledger's index beside its file, durably. *Blocking*;
    a spilled column is copied a block at a time, never whole in memory."""
    entries = len(offsets) - 1
    path = index_path(log_path)
    tmp = log_path.removesuffix(".log") + TMP_SUFFIX
    body = itertools.chain(
        [FILE_HEADER.pack(MAGIC, VERSION, entries, offsets[-1])], _chunks(offsets), _chunks(cum)
    )
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        for part in body:
            view = memoryview(part)
            while view:
                view = view[os.write(fd, view) :]
        os.fdatasync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _chunks(column: array[int] | TailIndex) -> Iterator[bytes]:
    if isinstance(column, TailIndex):
        yield from column.chunks()
    else:
        yield column.tobytes()


def open_index(
    log_path: str, data_fd: int, expected_entries: int, maps: IndexMaps
) -> tuple[PagedIndex, PagedIndex] | None:
    """The index of a sealed ledger file (offsets, cumulative counts); None
    when there is none or it does not match the file (then the caller
    scans). *Blocking*; nothing stays mapped or open."""
    path = index_path(log_path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        size = os.fstat(fd).st_size
        head = os.pread(fd, FILE_HEADER.size, 0)
        if len(head) != FILE_HEADER.size:
            return None
        magic, version, entries, data_end = FILE_HEADER.unpack(head)
        if magic != MAGIC or version != VERSION or entries < 1:
            return None
        width = 8 * (entries + 1)
        if size != FILE_HEADER.size + 2 * width:
            return None
        if expected_entries >= 0 and entries != expected_entries:
            return None
        ends = os.pread(fd, 16, FILE_HEADER.size + width - 16)
        last_cum = os.pread(fd, 8, FILE_HEADER.size + 2 * width - 8)
    finally:
        os.close(fd)
    last_start, last_end = _PAIR.unpack(ends)
    if last_end != data_end or not _matches(data_fd, last_start, data_end):
        return None
    (cum,) = _ONE.unpack(last_cum)
    return (
        PagedIndex(path, entries, data_end, 0, maps),
        PagedIndex(path, entries, cum, 1, maps),
    )


def _matches(fd: int, last: int, data_end: int) -> bool:
    """The ledger file holds the indexed records: its last record (from
    ``last`` to ``data_end``) passes its checksum and no valid record follows."""
    file_size = os.fstat(fd).st_size
    if file_size < data_end or not 0 <= last < data_end:
        return False
    record = os.pread(fd, data_end - last, last)
    if len(record) != data_end - last or len(record) < HEADER_SIZE:
        return False
    crc, length, _nm = HEADER.unpack_from(record)
    if HEADER_SIZE + length != len(record) or crc32c(record[4:]) != crc:
        return False
    after = os.pread(fd, HEADER_SIZE, data_end)
    if len(after) < HEADER_SIZE:
        return True
    crc, length, _nm = HEADER.unpack_from(after)
    if data_end + HEADER_SIZE + length > file_size:
        return True  # no whole record fits there (preallocated zeros, say)
    following = os.pread(fd, length, data_end + HEADER_SIZE)
    return bool(crc32c(following, crc32c(after[4:])) != crc)


def remove_index(log_path: str) -> None:
    """*Blocking*; no error when there is none."""
    for path in (
        index_path(log_path),
        log_path.removesuffix(".log") + TMP_SUFFIX,
        part_path(log_path),
    ):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
