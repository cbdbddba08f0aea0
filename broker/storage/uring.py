"""fdatasync without a thread: a small io_uring submission ring.

A group commit's fdatasync used to run on the I/O thread. The hop there
and back cost more than the sync itself under load (issue 50: 0.6-0.7 ms
mean waiting for the GIL before the thread could start, 0.14 ms back,
against 0.5 ms of fdatasync), and the thread's Python work competed with
the loop for the GIL. Here the loop writes an IORING_OP_FSYNC entry to a
ring shared with the kernel; a kernel worker runs the sync and posts its
completion, which an eventfd registered with the ring reports to the event
loop like any readable socket. No Python thread runs for it.

Only what the journal needs: fdatasync of one descriptor, a handful in
flight. ``SyncRing.open`` returns None where io_uring is missing or
refused (old kernels, seccomp profiles that forbid it, other
architectures), and the journal keeps its thread. The ring's memory is read
and written with plain loads and stores, which is enough on x86-64's
ordering (the kernel publishes with release stores, and io_uring_enter is a
full barrier); on other architectures the ring is not used.
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


class SyncRing:
    """An io_uring that runs fdatasync for the event loop. Loop thread only."""

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
        self._pending: dict[int, asyncio.Future[None]] = {}
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
    def open(cls, loop: asyncio.AbstractEventLoop) -> SyncRing | None:
        """A ring, or None where io_uring cannot be used here (logged)."""
        if platform.machine() != "x86_64" or _libc_syscall is None:
            return None
        params = ctypes.create_string_buffer(_PARAMS.size)
        fd = _syscall(_SYS_IO_URING_SETUP, _L(ENTRIES), params)
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

    def fdatasync(self, fd: int) -> asyncio.Future[None]:
        """fdatasync ``fd``: the future fails with the sync's OSError. Raises
        OSError at once when the request could not be submitted (nothing ran)."""
        if self._closed:
            raise OSError(errno.EBADF, "the sync ring is closed")
        if len(self._pending) >= self._capacity:
            raise OSError(errno.EAGAIN, "the sync ring is full")
        user_data = self._next_id
        self._next_id += 1
        tail = self._sq_tail
        index = tail & self._sq_mask
        _SQE.pack_into(
            self._sqes,
            index * _SQE.size,
            _IORING_OP_FSYNC,
            0,
            0,
            fd,
            0,
            0,
            0,
            _IORING_FSYNC_DATASYNC,
            user_data,
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
        if _syscall(_SYS_IO_URING_ENTER, _L(self._fd), _L(1), _L(0), _L(0), None, _L(0)) != 1:
            err = _last_error("io_uring_enter")
            # Take the entry back: the kernel consumed none.
            tail = (tail - 1) & 0xFFFFFFFF
            _U32.pack_into(self._sq, self._sq_tail_off, tail)
            self._sq_tail = tail
            raise err
        fut: asyncio.Future[None] = self._loop.create_future()
        self._pending[user_data] = fut
        return fut

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
            fut = pending.pop(user_data, None)
            if fut is None or fut.done():
                continue
            if res < 0:
                fut.set_exception(OSError(-res, f"fdatasync: {os.strerror(-res)}"))
            else:
                fut.set_result(None)
        _U32.pack_into(cq, self._cq_head_off, head)

    def close(self) -> None:
        """Idempotent. Syncs still in flight fail (the journal waits for its
        rounds before closing, so there are none)."""
        if self._closed:
            return
        self._closed = True
        self._loop.remove_reader(self._efd)
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(OSError(errno.ECANCELED, "the sync ring was closed"))
        self._pending.clear()
        os.close(self._efd)
        self._unmap()
        # Closing the ring waits in the kernel for requests still running.
        os.close(self._fd)

    def _unmap(self) -> None:
        for m in {id(x): x for x in (self._sq, self._cq, self._sqes)}.values():
            m.close()


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
