"""One ledger's segment file: append, sync, read, recover, plus its entry index.

Methods marked *blocking* run on an I/O worker thread; the index arrays
(``offsets``, ``cum_messages``) are read and extended on the event loop thread
only, after the blocking append that produced them has returned. Once the
ledger is sealed they are views of its index file instead (index_file.py).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from array import array
from itertools import accumulate

from magnetar.broker.storage.api import Entry
from magnetar.broker.storage.index_file import (
    MIN_INDEXED_ENTRIES,
    IndexArray,
    IndexMaps,
    PagedIndex,
    open_index,
    write_index,
)
from magnetar.broker.storage.records import (
    HEADER_SIZE,
    ScanResult,
    decode_range,
    encode_group,
    encode_record,
    scan,
)
from magnetar.broker.storage.tail_index import TailIndex, spill_if_long


class WriteFailed(Exception):
    """An append failed; ``recovered``: the file is as before the append."""

    def __init__(self, message: str, recovered: bool) -> None:
        super().__init__(message)
        self.recovered = recovered


def fsync_dir(path: str) -> None:
    """Make a directory's entries (created/renamed files) durable. *Blocking*."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# Above this many files to sync, one syncfs(2) of the filesystem beats one
# fsync each: every fsync of a file with new blocks commits the filesystem's
# journal on its own (20,000 ledger files took 7 s at a broker's shutdown).
SYNCFS_MIN_FILES = 64

_libc = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None


def syncfs_available() -> bool:
    return getattr(_libc, "syncfs", None) is not None


def sync_filesystem(path: str) -> bool:
    """syncfs(2): every dirty file and directory entry of the filesystem that
    holds ``path`` written and flushed in one call. False where the call is
    not available (then sync file by file); OSError on a write-back error.
    *Blocking*."""
    syncfs = getattr(_libc, "syncfs", None)
    if syncfs is None:
        return False
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if syncfs(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"syncfs failed: {os.strerror(err)}", path)
    finally:
        os.close(fd)
    return True


class LedgerFile:
    """An append-only file of records for one ledger id."""

    __slots__ = (
        "_alloc_end",
        "_closed",
        "_fd",
        "_index",
        "_prealloc_failed",
        "_uncached_end",
        "_write_end",
        "cum_messages",
        "ledger_id",
        "offsets",
        "path",
        "refs",
    )

    def __init__(self, path: str, ledger_id: int, fd: int, scan_result: ScanResult) -> None:
        self.path = path
        self.ledger_id = ledger_id
        self._fd = fd
        self._closed = False
        self.offsets: IndexArray = scan_result.offsets
        self.cum_messages: IndexArray = scan_result.cum_messages
        # The index file's views once sealed (None: the arrays above grow).
        self._index: tuple[PagedIndex, PagedIndex] | None = None
        self._write_end = scan_result.valid_end
        # The file's size: zeros may follow the last record (preallocation).
        self._alloc_end = scan_result.valid_end
        self._prealloc_failed = False
        # Bytes before this have been dropped from the page cache (journals).
        self._uncached_end = 0
        # Reads in flight on a worker thread; the fd is closed only at zero.
        self.refs = 0

    # -------------------------------------------------------------- blocking helpers

    @classmethod
    def create(cls, path: str, ledger_id: int, sync_dir: bool = True) -> LedgerFile:
        """Create an empty file (fails if it exists). *Blocking*. Without
        ``sync_dir`` the new name is made durable later (the journal's
        checkpoint; replay recreates a ledger file its metadata names)."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        if sync_dir:
            fsync_dir(os.path.dirname(path))
        return cls(path, ledger_id, fd, ScanResult(array("q", [0]), array("q", [0]), False))

    @classmethod
    def unborn(cls, path: str, ledger_id: int) -> LedgerFile:
        """A file made later, on a worker thread; no descriptor until
        :meth:`open_fd` (nothing reads or writes it before it exists)."""
        return cls(path, ledger_id, -1, ScanResult(array("q", [0]), array("q", [0]), False))

    @classmethod
    def open_existing(
        cls,
        path: str,
        ledger_id: int,
        recover: bool,
        entries: int = -1,
        maps: IndexMaps | None = None,
    ) -> tuple[LedgerFile, int, bool]:
        """Open and index a file. *Blocking*.

        Returns the file, the number of bytes after the last valid record, and
        whether those bytes are a torn write rather than preallocated zeros.
        A sealed ledger's index file, when it matches the file, is mapped and
        nothing is scanned. Else ``recover`` (the ledger that was being
        written): verify every checksum and cut the file after the last valid
        record, then fsync; otherwise the records are indexed without
        checksums (reads verify them), at most ``entries`` of them when >= 0
        (the count recorded when it was closed). Every file opened here is
        sealed (a new ledger takes the appends), so with ``maps`` a large one
        scanned gets its index file now.
        """
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        try:
            index = open_index(path, fd, entries, maps) if maps is not None else None
        except BaseException:
            os.close(fd)
            raise
        if index is not None:
            lf = cls(path, ledger_id, fd, ScanResult(array("q", [0]), array("q", [0]), False))
            lf._adopt(index)
            end = index[0][-1]
            lf._write_end = lf._alloc_end = end
            # The ledger that was being written: its preallocated zeros go
            # (the index matched, so no record follows its end).
            try:
                cut = os.fstat(fd).st_size - end if recover else 0
                if cut > 0:
                    os.ftruncate(fd, end)
                    os.fsync(fd)
            except BaseException:
                lf.close()
                raise
            return lf, max(cut, 0), False
        try:
            size = os.fstat(fd).st_size
            buf = _pread_all(fd, size, 0)
            result = scan(buf, verify=recover, limit=-1 if recover else entries)
            cut = size - result.valid_end
            torn = cut > 0 and buf.count(0, result.valid_end) != cut
            if cut and recover:
                os.ftruncate(fd, result.valid_end)
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            raise
        lf = cls(path, ledger_id, fd, result)
        if not recover:
            lf._alloc_end = size
        if maps is not None and not (torn and not recover):
            with contextlib.suppress(OSError):  # best effort: the arrays stay
                sealed = lf.seal_index(maps)
                if sealed is not None:
                    lf._adopt(sealed)
        return lf, cut, torn

    def seal_index(self, maps: IndexMaps) -> tuple[PagedIndex, PagedIndex] | None:
        """Nothing is appended any more: write a large index to its file, for
        :meth:`adopt_index` on the loop thread (the arrays are only read
        here: sealed). None for a small one. *Blocking*."""
        offsets, cum = self.offsets, self.cum_messages
        if isinstance(offsets, PagedIndex) or len(offsets) - 1 < MIN_INDEXED_ENTRIES:
            return None  # sealed already, or small
        assert not isinstance(cum, PagedIndex)
        write_index(self.path, offsets, cum)
        fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            return open_index(self.path, fd, len(self.offsets) - 1, maps)
        finally:
            os.close(fd)

    def adopt_index(self, index: tuple[PagedIndex, PagedIndex]) -> None:
        """Serve lookups from the index file, freeing the arrays (loop thread)."""
        if self._closed or self._index is not None:
            return
        spilled = self.offsets
        self._adopt(index)
        if isinstance(spilled, TailIndex):
            spilled.remove_spill()  # superseded by the index file

    def _adopt(self, index: tuple[PagedIndex, PagedIndex]) -> None:
        self._index = index
        self.offsets, self.cum_messages = index

    @property
    def sealed_index(self) -> bool:
        """The index is the mapped file (the ledger is sealed and large)."""
        return self._index is not None

    def append(self, datas: list[bytes], nmsgs: list[int], sync: bool) -> array[int]:
        """Write a group of records at the end, optionally fsync. *Blocking*.

        Returns the end offset of every new record. Raises :class:`WriteFailed`;
        when its ``recovered`` is True the file was cut back to its previous end
        and the next append may proceed.
        """
        parts, ends = self.encode(datas, nmsgs)
        return self.write_records(parts, ends, sync)

    def encode(self, datas: list[bytes], nmsgs: list[int]) -> tuple[list[bytes], array[int]]:
        """The buffers of a group's records and the end offset of each, for
        :meth:`write_records`. Loop thread: the encoding holds the GIL wherever
        it runs, so the I/O thread is left with the syscalls alone."""
        if len(datas) == 1:  # a group per message over many topics: no iterators
            return encode_record(datas[0], nmsgs[0]), array(
                "q", (self._write_end + HEADER_SIZE + len(datas[0]),)
            )
        ends = array("q", accumulate(map(_PLUS_HEADER, map(len, datas)), initial=self._write_end))
        del ends[0]
        return encode_group(datas, nmsgs), ends

    def write_records(self, parts: list[bytes], ends: array[int], sync: bool) -> array[int]:
        """Write encoded records at the end, optionally fsync. *Blocking*; see append."""
        start = self._write_end
        end = ends[-1]
        try:
            _pwritev_all(self._fd, parts, start)
        except OSError as exc:
            try:
                os.ftruncate(self._fd, start)
                self._alloc_end = start
            except OSError as exc2:
                raise WriteFailed(f"write failed and cut-back failed: {exc2}", False) from exc
            raise WriteFailed(f"write failed: {exc}", True) from exc
        if sync and end > self._alloc_end:
            self._preallocate(end)
        if sync:
            try:
                os.fdatasync(self._fd)
            except OSError as exc:
                # After a failed fsync the page cache cannot be trusted (Linux
                # may drop the dirty pages): stop writing to this file.
                raise WriteFailed(f"fsync failed: {exc}", False) from exc
        self._write_end = end
        return ends

    def append_raw(self, parts: list[bytes], nbytes: int, sync: bool) -> int:
        """Write ``nbytes`` of already encoded bytes at the end (the journal's
        groups: no index of their own). *Blocking*; see :meth:`write_records`."""
        return self.write_records(parts, array("q", [self._write_end + nbytes]), sync)[-1]

    def allocated_for(self, end: int) -> bool:
        """Whether blocks are already allocated up to ``end``, so a write that
        far needs no preallocation before its fdatasync (loop thread)."""
        return end <= self._alloc_end

    @property
    def fd(self) -> int:
        """The open descriptor (-1 once closed)."""
        return self._fd

    def cut_back(self, end: int) -> None:
        """Undo appends after ``end`` (their group failed elsewhere). *Blocking*;
        raises OSError when the file could not be cut."""
        os.ftruncate(self._fd, end)
        self._write_end = end
        self._alloc_end = end

    @property
    def write_end(self) -> int:
        """Where the next append goes (loop thread, between appends)."""
        return self._write_end

    def _preallocate(self, end: int) -> None:
        """Zeros ahead of the data: later groups overwrite allocated blocks, so
        their fdatasync need not commit a size change (it takes half the time).
        Best effort: without space for the zeros, go on without them."""
        try:
            _pwrite_all(self._fd, _ZEROS, end)
            self._alloc_end = end + len(_ZEROS)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, end)
            self._alloc_end = end

    def needs_preallocation(self) -> bool:
        """Less than an idle step of zeros left ahead of the data (loop thread);
        for an empty file, none at all."""
        if self._write_end == 0:
            return self._fd >= 0 and not self._prealloc_failed and self._alloc_end == 0
        return (
            self._fd >= 0
            and not self._prealloc_failed
            and self._alloc_end - self._write_end < IDLE_PREALLOCATION_STEP
        )

    def preallocate_ahead(self) -> None:
        """The next idle step of zeros, made durable now. *Blocking*; called by the
        writer between group commits while nothing waits, so the fdatasync
        that commits the new size and blocks (and, on a shared ext4, whatever
        other files' data that commit must flush first) delays no receipt.
        Best effort: after a failure appends preallocate for themselves."""
        fd = self._fd
        if fd < 0:
            return
        start = max(self._alloc_end, self._write_end)
        step = FIRST_PREALLOCATION_STEP if start == 0 else IDLE_PREALLOCATION_STEP
        try:
            _pwrite_all(fd, memoryview(_ZEROS)[:step], start)
            os.fdatasync(fd)
        except OSError:
            self._prealloc_failed = True
            with contextlib.suppress(OSError):
                os.ftruncate(fd, start)
            return
        self._alloc_end = start + step

    def trim_tail(self) -> None:
        """Cut preallocated zeros after the last record (ledger closed). *Blocking*."""
        if self._fd >= 0 and self._alloc_end > self._write_end:
            os.ftruncate(self._fd, self._write_end)
            self._alloc_end = self._write_end

    def sync(self) -> None:
        """fdatasync. *Blocking*. No-op once closed (a trimmed ledger)."""
        fd = self._fd
        if fd >= 0:
            os.fdatasync(fd)

    def uncache(self, end: int) -> None:
        """Drop the whole pages before ``end`` from the page cache, once
        synced. *Blocking*; for journal files: nothing reads one while its
        broker runs (replay reads it from disk at the next start), so its
        cached pages only take memory, and once dropped the next
        preallocation reuses them instead of taking fresh pages (on this
        kind of virtual machine a page the process never had costs several
        times its copy). The last partial page stays: the next append fills
        it without reading it back. Dirty pages are never dropped (the kernel
        skips them), so a page not yet synced is safe. Best effort.

        The kernel drops a large folio (one preallocation's zeros may make
        4 MiB ones) only when the range covers all of it, so each call goes
        back over the last preallocation step's worth: a folio passed over
        while the data ended inside it is dropped once the data is past it."""
        end -= end % _PAGE
        if end - self._uncached_end < UNCACHE_STEP:
            return
        start = max(0, self._uncached_end - PREALLOCATION_STEP)
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.posix_fadvise(self._fd, start, end - start, os.POSIX_FADV_DONTNEED)
            self._uncached_end = end

    def sync_by_path(self) -> None:
        """fdatasync through a descriptor of its own (the shared one may be
        closed by the open-file limit meanwhile); a file deleted since needs
        none. *Blocking*."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return
        try:
            os.fdatasync(fd)
        finally:
            os.close(fd)

    # A file whose records are elsewhere (objects/ledger_file.py): read with
    # ``fetch`` on the loop instead of ``read`` on an I/O thread.
    remote = False

    async def fetch(self, first_entry_id: int, offsets: array[int]) -> list[Entry]:
        """``read`` for a remote file, awaited on the loop."""
        raise NotImplementedError(f"{self.path} is a local file: use read")

    def read(self, first_entry_id: int, offsets: array[int]) -> list[Entry]:
        """Entries ``first_entry_id ..`` whose record bounds are ``offsets``. *Blocking*."""
        base = offsets[0]
        buf = _pread_all(self._fd, offsets[-1] - base, base)
        return decode_range(buf, self.ledger_id, first_entry_id, offsets, base)

    def open_fd(self) -> None:
        """Open the descriptor again if the open-file limit closed it (loop
        thread, see handles.py). Raises OSError once closed for good."""
        if self._fd < 0:
            if self._closed:
                raise OSError(f"{self.path} is closed")
            self._fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)

    def release_fd(self) -> None:
        """Close the descriptor until the next :meth:`open_fd` (loop thread)."""
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)

    def close(self) -> None:
        """Close for good. *Blocking* (cheap). Idempotent."""
        self._closed = True
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)
        index, self._index = self._index, None
        if index is not None:
            # Unmapped; a lookup after this (a reader finishing) maps it again.
            index[0].close()
            index[1].close()

    # ------------------------------------------------------------ loop-thread helpers

    @property
    def entry_count(self) -> int:
        return len(self.offsets) - 1

    @property
    def size(self) -> int:
        """Bytes of the file that hold valid records."""
        return self.offsets[-1]

    @property
    def data_size(self) -> int:
        """Bytes of entry data (records minus headers)."""
        return self.offsets[-1] - HEADER_SIZE * (len(self.offsets) - 1)

    @property
    def message_count(self) -> int:
        return self.cum_messages[-1]

    def extend_index(self, ends: array[int], nmsgs: list[int]) -> None:
        """Record a completed append (loop thread)."""
        offsets = self.offsets
        cum = self.cum_messages
        assert not isinstance(offsets, PagedIndex) and not isinstance(cum, PagedIndex), "sealed"
        offsets.extend(ends)
        total = cum[-1]
        for nm in nmsgs:
            total += nm
            cum.append(total)
        self.offsets, self.cum_messages = spill_if_long(offsets, cum, self.path)


# Zeros preallocated by a group commit that runs past them. The fdatasync
# after them commits a new size (an ext4 journal commit): a few per second at
# most keeps appends fast under load (1 MiB steps cost a quarter of the
# 1 KiB-entry throughput in the storage benchmark).
PREALLOCATION_STEP = 4 * 1024 * 1024
# Zeros added at a time by an idle writer, keeping at least this much ahead.
# The flush of 4 MiB stalled whatever arrived meanwhile for 3-40 ms here (the
# end-to-end p99 at 2,000 msg/s); 1 MiB takes about 1 ms.
IDLE_PREALLOCATION_STEP = 1024 * 1024
# An empty file's first idle step: a ledger opened but never written to (a
# topic that is only read, say) keeps only this much.
FIRST_PREALLOCATION_STEP = 64 * 1024
_ZEROS = bytes(PREALLOCATION_STEP)
# A journal's synced pages are dropped from the cache this much at a time
# (small appends would otherwise make a syscall each for a page or two).
UNCACHE_STEP = 256 * 1024
_PAGE = os.sysconf("SC_PAGE_SIZE")
_PLUS_HEADER = HEADER_SIZE.__add__


def _pread_all(fd: int, size: int, offset: int) -> bytes:
    buf = os.pread(fd, size, offset)
    if len(buf) == size:
        return buf
    parts = [buf]
    got = len(buf)
    while got < size:
        chunk = os.pread(fd, size - got, offset + got)
        if not chunk:
            raise OSError(f"short read: wanted {size} bytes at {offset}, file ends at {got}")
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


# Buffers one pwritev may take (Linux's UIO_MAXIOV).
_IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024


def _pwritev_all(fd: int, parts: list[bytes], offset: int) -> None:
    """Gather-write `parts` at `offset`: no joined copy of the group."""
    pending: list[bytes | memoryview] = list(parts)
    while pending:
        batch = pending[:_IOV_MAX]
        written = os.pwritev(fd, batch, offset)
        offset += written
        if written == sum(map(len, batch)):
            del pending[:_IOV_MAX]
            continue
        # A short write: drop the buffers written, keep the rest of the last one.
        k = 0
        while written >= len(batch[k]):
            written -= len(batch[k])
            k += 1
        pending[: k + 1] = [memoryview(batch[k])[written:]]


def _pwrite_all(fd: int, buf: bytes | memoryview, offset: int) -> None:
    mv = memoryview(buf)
    done = 0
    while done < len(mv):
        done += os.pwrite(fd, mv[done:], offset + done)
