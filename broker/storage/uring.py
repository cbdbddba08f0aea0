"""fdatasync without a thread: a small io_uring submission ring.

A group commit's fdatasync used to run on the I/O thread. The hop there
and back cost more than the sync itself under load (issue 50: 0.6-0.7 ms
mean waiting for the GIL before the thread could start, 0.14 ms back,
against 0.5 ms of fdatasync), and the thread's Python work competed with
the loop for the GIL. Here the loop writes an IORING_OP_FSYNC entry to a
ring shared with the kernel; a kernel worker runs the sync and posts its
completion, which an eventfd registered with the ring reports to the event
loop like any readable socket. No Python thread runs for it.

Only what storage needs: fdatasync of one descriptor, and chains of
mkdirat and openat. ``IoRing.open`` returns None where io_uring is missing or
refused (old kernels, seccomp profiles that forbid it, other
architectures), and the journal keeps its thread. The ring's memory is read
and written with plain loads and stores, which is enough on x86-64's
ordering (the kernel publishes with release stores, and io_uring_enter is a
full barrier); on other architectures the ring is not used.

New ledgers' directories and first files are made the same way
(births.py): one chain of mkdirat and openat per batch of new ledgers,
run in order by one kernel worker. On the I/O thread the same three calls per topic took the GIL
after each syscall from a loop that was busy creating topics, which cut
the creation rate by a quarter to a third (issue 43).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import mmap
import os
import platform
import struct
from collections.abc import Callable
from typing import cast

import structlog

log = structlog.get_logger(__name__)

# x86-64 syscall numbers (the ring is used on x86-64 only).
_SYS_IO_URING_SETUP = 425
_SYS_IO_URING_ENTER = 426
_SYS_IO_URING_REGISTER = 427

_IORING_OP_FSYNC = 3
_IORING_OP_OPENAT = 18
_IORING_OP_MKDIRAT = 37
_IOSQE_IO_HARDLINK = 1 << 3
_AT_FDCWD = -100
_IORING_FSYNC_DATASYNC = 1
_IORING_OFF_SQ_RING = 0
_IORING_OFF_CQ_RING = 0x8000000
_IORING_OFF_SQES = 0x10000000
_IORING_FEAT_SINGLE_MMAP = 1
_IORING_REGISTER_EVENTFD = 4

# struct io_uring_params: ten u32 (sq_entries ... resv[3]), then
# io_sqring_offsets and io_cqring_offsets (eight u32 and one u64 each).
_PARAMS = struct.Struct("<10I8IQ8IQ")
# struct io_uring_sqe, 64 bytes: opcode, flags, ioprio, fd, off, addr, len,
# fsync_flags, user_data, buf_index, personality, splice_fd_in, addr3, pad.
_SQE = struct.Struct("<BBHiQQIIQHHiQQ")
_CQE = struct.Struct("<QiI")
_U32 = struct.Struct("<I")
# Variadic syscall(): every argument passed at full register width.
_L = ctypes.c_long

ENTRIES = 16

# One submission: opcode, fd, the buffer the kernel reads from until done
# (its address goes in addr), len, the op's flags word.
_Op = tuple[int, int, ctypes.Array[ctypes.c_char] | None, int, int]


class IoRing:
    """An io_uring that runs fdatasync, mkdir and open for the event loop.
    Loop thread only."""

    def __init__(self, fd: int, params: tuple[int, ...], loop: asyncio.AbstractEventLoop) -> None:
        self._fd = fd
        sq_entries, cq_entries = params[0], params[1]
        features = params[5]
        sq_off, cq_off = params[10:19], params[19:28]
        sq_size = sq_off[6] + sq_entries * 4
        cq_size = cq_off[5] + cq_entries * _CQE.size
        prot = mmap.PROT_READ | mmap.PROT_WRITE
        if features & _IORING_FEAT_SINGLE_MMAP:
            size = max(sq_size, cq_size)
            self._sq = mmap.mmap(fd, size, mmap.MAP_SHARED, prot, offset=_IORING_OFF_SQ_RING)
            self._cq = self._sq
        else:
            self._sq = mmap.mmap(fd, sq_size, mmap.MAP_SHARED, prot, offset=_IORING_OFF_SQ_RING)
            self._cq = mmap.mmap(fd, cq_size, mmap.MAP_SHARED, prot, offset=_IORING_OFF_CQ_RING)
        self._sqes = mmap.mmap(
            fd, sq_entries * _SQE.size, mmap.MAP_SHARED, prot, offset=_IORING_OFF_SQES
        )
        self._sq_tail_off = sq_off[1]
        self._sq_mask = _U32.unpack_from(self._sq, sq_off[2])[0]
        self._sq_array_off = sq_off[6]
        self._cq_head_off = cq_off[0]
        self._cq_tail_off = cq_off[1]
        self._cq_mask = _U32.unpack_from(self._cq, cq_off[2])[0]
        self._cqes_off = cq_off[5]
        self._capacity = min(sq_entries, cq_entries)
        self._sq_tail = _U32.unpack_from(self._sq, self._sq_tail_off)[0]
        self._loop = loop
        # user_data -> (what it is, its future, the buffer the kernel reads).
        self._pending: dict[
            int, tuple[str, asyncio.Future[int], ctypes.Array[ctypes.c_char] | None]
        ] = {}
        self._next_id = 1
        self._closed = False
        self._efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        try:
            arg = ctypes.c_int32(self._efd)
            what = _L(_IORING_REGISTER_EVENTFD)
            if _syscall(_SYS_IO_URING_REGISTER, _L(fd), what, ctypes.byref(arg), _L(1)) < 0:
                raise _last_error("io_uring_register")
            loop.add_reader(self._efd, self._reap)
        except BaseException:
            os.close(self._efd)
            self._unmap()
            raise

    @classmethod
    def open(cls, loop: asyncio.AbstractEventLoop, entries: int = ENTRIES) -> IoRing | None:
        """A ring, or None where io_uring cannot be used here (logged)."""
        if platform.machine() != "x86_64" or _libc_syscall is None:
            return None
        params = ctypes.create_string_buffer(_PARAMS.size)
        fd = _syscall(_SYS_IO_URING_SETUP, _L(entries), params)
        if fd < 0:
            why = os.strerror(ctypes.get_errno())
            log.info("io_uring unavailable: fdatasync runs on the I/O thread", error=why)
            return None
        try:
            return cls(fd, _PARAMS.unpack(params.raw), loop)
        except (OSError, ValueError) as exc:
            os.close(fd)
            log.info("io_uring unusable: fdatasync runs on the I/O thread", error=str(exc))
            return None

    def fdatasync(self, fd: int) -> asyncio.Future[int]:
        """fdatasync ``fd``: the future fails with the sync's OSError. Raises
        OSError at once when the request could not be submitted (nothing ran)."""
        sync = (_IORING_OP_FSYNC, fd, None, 0, _IORING_FSYNC_DATASYNC)
        (fut,) = self._submit([("fdatasync", sync)])
        return fut

    def make_dirs_and_files(
        self, paths: list[tuple[str, str]], file_mode: int = 0o644
    ) -> list[tuple[asyncio.Future[int], asyncio.Future[int]]]:
        """For each (directory, file): mkdir the directory (0o755), then
        create the file exclusively (read-write); the second future gives
        its descriptor, which the caller closes. All of them run one after
        the other, as one chain on one kernel worker: many at once would
        contend for the parent directory's lock and the CPU the loop needs.
        The chain goes on past a failure (a hard link), so a create follows
        its failed mkdir and says what it found. Raises OSError at once when
        nothing could be submitted."""
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        ops: list[tuple[str, _Op]] = []
        for directory, file in paths:
            ops.append(("mkdir", (_IORING_OP_MKDIRAT, _AT_FDCWD, _path(directory), 0o755, 0)))
            ops.append(("create", (_IORING_OP_OPENAT, _AT_FDCWD, _path(file), file_mode, flags)))
        futures = self._submit(ops, chained=True) if ops else []
        return list(zip(futures[::2], futures[1::2], strict=True))

    @property
    def room(self) -> int:
        """How many more operations can be in flight."""
        return 0 if self._closed else self._capacity - len(self._pending)

    def _submit(
        self, ops: list[tuple[str, _Op]], chained: bool = False
    ) -> list[asyncio.Future[int]]:
        """Submit ``ops`` with one io_uring_enter; ``chained``: each hard-linked
        to the next, so they run in order and a failure does not stop the rest."""
        if self._closed:
            raise OSError(errno.EBADF, "the ring is closed")
        if len(self._pending) + len(ops) > self._capacity:
            raise OSError(errno.EAGAIN, "the ring is full")
        first_id = self._next_id
        start = tail = self._sq_tail
        last = len(ops) - 1
        for i, (_what, (opcode, fd, buf, length, op_flags)) in enumerate(ops):
            flags = _IOSQE_IO_HARDLINK if chained and i < last else 0
            index = tail & self._sq_mask
            addr = ctypes.addressof(buf) if buf is not None else 0
            _SQE.pack_into(
                self._sqes,
                index * _SQE.size,
                opcode,
                flags,
                0,
                fd,
                0,
                addr,
                length,
                op_flags,
                first_id + i,
                0,
                0,
                0,
                0,
                0,
            )
            _U32.pack_into(self._sq, self._sq_array_off + index * 4, index)
            tail = (tail + 1) & 0xFFFFFFFF
        _U32.pack_into(self._sq, self._sq_tail_off, tail)
        self._sq_tail = tail
        n = len(ops)
        taken = _syscall(_SYS_IO_URING_ENTER, _L(self._fd), _L(n), _L(0), _L(0), None, _L(0))
        if taken < 0:
            taken = 0
            err = _last_error("io_uring_enter")
        elif taken < n:  # the kernel stops at an entry it refused (its CQE says why)
            err = OSError(errno.ECANCELED, "not submitted: an earlier entry was refused")
        if taken < n:
            # Entries the kernel did not take are taken back (it reads only
            # up to the tail it saw).
            back = (start + taken) & 0xFFFFFFFF
            _U32.pack_into(self._sq, self._sq_tail_off, back)
            self._sq_tail = back
            if taken == 0:
                raise err
        self._next_id = first_id + n
        futures: list[asyncio.Future[int]] = []
        for i, (what, op) in enumerate(ops):
            fut: asyncio.Future[int] = self._loop.create_future()
            if i < taken:
                self._pending[first_id + i] = (what, fut, op[2])
            else:
                fut.set_exception(OSError(err.errno, f"{what}: {err.strerror}"))
            futures.append(fut)
        return futures

    def _reap(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.eventfd_read(self._efd)
        cq = self._cq
        head = _U32.unpack_from(cq, self._cq_head_off)[0]
        tail = _U32.unpack_from(cq, self._cq_tail_off)[0]
        pending = self._pending
        while head != tail:
            user_data, res, _flags = _CQE.unpack_from(
                cq, self._cqes_off + (head & self._cq_mask) * _CQE.size
            )
            head = (head + 1) & 0xFFFFFFFF
            entry = pending.pop(user_data, None)
            if entry is None or entry[1].done():
                continue
            what, fut, _buf = entry
            if res < 0:
                fut.set_exception(OSError(-res, f"{what}: {os.strerror(-res)}"))
            else:
                fut.set_result(res)
        _U32.pack_into(cq, self._cq_head_off, head)

    def close(self) -> None:
        """Idempotent. Operations still in flight fail (their owners wait
        for them before closing, so there are none)."""
        if self._closed:
            return
        self._closed = True
        self._loop.remove_reader(self._efd)
        for what, fut, _buf in self._pending.values():
            if not fut.done():
                fut.set_exception(OSError(errno.ECANCELED, f"{what}: the ring was closed"))
        self._pending.clear()
        os.close(self._efd)
        self._unmap()
        # Closing the ring waits in the kernel for requests still running.
        os.close(self._fd)

    def _unmap(self) -> None:
        for m in {id(x): x for x in (self._sq, self._cq, self._sqes)}.values():
            m.close()


def _path(path: str) -> ctypes.Array[ctypes.c_char]:
    return ctypes.create_string_buffer(os.fsencode(path))


def _load_syscall() -> Callable[..., int] | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.syscall
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_long
    return cast("Callable[..., int]", fn)


def _syscall(*args: object) -> int:
    fn = _libc_syscall
    if fn is None:
        ctypes.set_errno(errno.ENOSYS)
        return -1
    return fn(*args)


def _last_error(what: str) -> OSError:
    err = ctypes.get_errno()
    return OSError(err, f"{what}: {os.strerror(err)}")


_libc_syscall = _load_syscall()
