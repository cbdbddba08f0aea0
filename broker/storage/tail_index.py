"""The index of the ledger being written, with all but its tail on disk.

A ledger takes appends for ten minutes at least (its minimum rollover time),
and a busy topic writes tens of thousands of entries in that time: 16 bytes
each in memory, growing until the rollover. Past SPILL_AT entries the older
ones go, SPILL_BLOCK at a time, to ``<id>.idx.part`` beside the ledger file
(a page-cache write of 64 KiB, no fsync: the ledger file is the truth and a
restart scans it), and only the tail stays in memory. Lookups in the tail,
which is where tailing reads and appends land, are array lookups; one in the
spilled part reads it back from the file. Sealing turns the whole into the
ledger's index file (index_file.py) and removes the part file.

The part file holds blocks of SPILL_BLOCK offsets then SPILL_BLOCK
cumulative message counts, native order, in entry order.
"""

from __future__ import annotations

import contextlib
import os
from array import array
from collections.abc import Iterator
from typing import overload

PART_SUFFIX = ".idx.part"
SPILL_BLOCK = 4096
# The tail is spilled down to SPILL_AT - SPILL_BLOCK entries once past this.
SPILL_AT = 2 * SPILL_BLOCK
_ITEM = 8


def part_path(log_path: str) -> str:
    return log_path.removesuffix(".log") + PART_SUFFIX


class SpillFile:
    """The spilled blocks of one ledger (loop thread: written in small blocks,
    read back for lookups; the sealing thread reads it whole)."""

    __slots__ = ("base", "path")

    def __init__(self, log_path: str) -> None:
        self.path = part_path(log_path)
        self.base = 0  # entries [0, base) are in the file
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)  # a leftover of an earlier run of this ledger

    def write_block(self, offsets: array[int], cum: array[int]) -> None:
        """Append one block of each column. *Blocking* (a page-cache write)."""
        data = offsets.tobytes() + cum.tobytes()
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            at = (self.base // SPILL_BLOCK) * len(data)
            view = memoryview(data)
            while view:
                view = view[os.pwrite(fd, view, at + len(data) - len(view)) :]
        finally:
            os.close(fd)
        self.base += SPILL_BLOCK

    def read(self, column: int, start: int, stop: int) -> array[int]:
        """Values ``[start, stop)`` of a column (0 offsets, 1 counts), all spilled."""
        out = array("q")
        fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            i = start
            while i < stop:
                block, within = divmod(i, SPILL_BLOCK)
                n = min(stop - i, SPILL_BLOCK - within)
                at = (2 * block + column) * SPILL_BLOCK * _ITEM + within * _ITEM
                got = os.pread(fd, n * _ITEM, at)
                if len(got) != n * _ITEM:
                    raise OSError(f"{self.path} is shorter than its {self.base} entries")
                out.frombytes(got)
                i += n
        finally:
            os.close(fd)
        return out

    def remove(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


class TailIndex:
    """One column of a ledger's index: spilled entries plus an in-memory
    tail, indexed and sliced as the array it replaces (slices are arrays)."""

    __slots__ = ("_column", "_spill", "tail")

    def __init__(self, spill: SpillFile, column: int, tail: array[int]) -> None:
        self._spill = spill
        self._column = column
        self.tail = tail  # values [spill.base, len)

    def __len__(self) -> int:
        return self._spill.base + len(self.tail)

    @overload
    def __getitem__(self, i: int) -> int: ...
    @overload
    def __getitem__(self, i: slice) -> array[int]: ...
    def __getitem__(self, i: int | slice) -> int | array[int]:
        base = self._spill.base
        if type(i) is int:
            if i < 0:
                i += base + len(self.tail)
            if i >= base:
                return self.tail[i - base]
            if i <= 0:
                if i == 0:
                    return 0  # both columns start at 0
                raise IndexError("index out of range")
            return self._spill.read(self._column, i, i + 1)[0]
        assert isinstance(i, slice)
        start, stop, step = i.indices(len(self))
        if step != 1:
            raise ValueError("only contiguous slices")
        if start >= base:
            return self.tail[start - base : stop - base]
        head = self._spill.read(self._column, start, min(stop, base))
        if stop > base:
            head.extend(self.tail[: stop - base])
        return head

    def extend(self, values: array[int]) -> None:
        self.tail.extend(values)

    def append(self, value: int) -> None:
        self.tail.append(value)

    def remove_spill(self) -> None:
        """The ledger's index file took over. *Blocking* (an unlink)."""
        self._spill.remove()

    def chunks(self) -> Iterator[bytes]:
        """Every value as bytes, a spilled block at a time, for the sealed
        index file. *Blocking*."""
        for start in range(0, self._spill.base, SPILL_BLOCK):
            yield self._spill.read(self._column, start, start + SPILL_BLOCK).tobytes()
        yield self.tail.tobytes()


def spill_if_long(
    offsets: array[int] | TailIndex, cum: array[int] | TailIndex, log_path: str
) -> tuple[array[int] | TailIndex, array[int] | TailIndex]:
    """After an append: past SPILL_AT entries in memory, the oldest block of
    each column goes to the part file (loop thread; a 64 KiB page-cache
    write). Returns the columns to use from now on."""
    tail = offsets.tail if isinstance(offsets, TailIndex) else offsets
    if len(tail) <= SPILL_AT:
        return offsets, cum
    if not isinstance(offsets, TailIndex):
        assert isinstance(cum, array)
        spill = SpillFile(log_path)
        offsets, cum = TailIndex(spill, 0, offsets), TailIndex(spill, 1, cum)
    assert isinstance(cum, TailIndex)
    spill = offsets._spill
    off_tail, cum_tail = offsets.tail, cum.tail
    try:
        spill.write_block(off_tail[:SPILL_BLOCK], cum_tail[:SPILL_BLOCK])
    except OSError:
        return offsets, cum  # best effort: the tail stays in memory
    del off_tail[:SPILL_BLOCK]
    del cum_tail[:SPILL_BLOCK]
    return offsets, cum
