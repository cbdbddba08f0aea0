"""What batched produce costs before any broker logic (`python -m bench floor`).

Two floors under `bench compare`'s "broker CPU: produce batched" row (one
SEND of 1,000 x 100 B, about 112 KB with the headers), each on this machine:

- storage: the syscalls Magnetar's journal makes for such a group under
  sync policy fsync, in a bare loop: the group appended to a ledger file
  (new page-cache pages), the same bytes to a preallocated journal file, one
  fdatasync, the synced journal pages dropped from the cache;
- event loop: a uvloop server that reads 112 KB frames from a loopback
  socket and answers each with a 40-byte reply, parsing nothing (five
  frames in flight, as the official client's batching producer keeps them).

The storage floor is measured twice more at a batching producer's pace (a
group every 3 ms, with and without the fdatasync): a thread that idles
between groups pays far more for its fdatasync on a virtual machine than
one in a busy loop, and issue 48's workload B runs at that pace.

CPU time of the thread doing the work (user + system), per message. The sum
is what any broker built this way spends before decoding a single frame;
pulsar-lite's whole broker, which does not fsync, is measured beside
Magnetar in `bench compare`.

A third figure is the disk's own latency: a 300-byte write and fdatasync,
one at a time (p50 / p99 / p99.9), what a lone send's receipt must wait
for under `fsync` before any broker work (issue 48's targets for the
single-send and end-to-end rows add its p99 to pulsar-lite's).
"""

from __future__ import annotations

import argparse
import asyncio
import mmap
import os
import socket
import tempfile
import threading
import time
from time import thread_time as _thread_cpu
from typing import cast

import uvloop

from magnetar.broker.storage.segment import PREALLOCATION_STEP, UNCACHE_STEP

GROUP_BYTES = 112_000
MESSAGES_PER_GROUP = 1000
REPLY = b"r" * 40
IN_FLIGHT = 5
# The storage floor again at a batching producer's pace (issue 48's B sends
# a 1,000-message batch every 3-4 ms): on a virtual machine the fdatasync
# of a thread that idles between groups costs far more than in a busy loop.
PACED_GAP_S = 0.003
PACED_GROUPS = 300


def storage_floor(groups: int, directory: str, sync: bool = True, gap_s: float = 0.0) -> float:
    """CPU seconds per group of the journal's syscalls under fsync; without
    ``sync`` the same writes without the fdatasync, so the difference is
    what the sync itself costs the broker's process. ``gap_s``: idle time
    between groups (a batching producer's pace; the CPU is read around the
    work only)."""
    data = os.urandom(GROUP_BYTES)
    ledger = os.open(os.path.join(directory, "ledger"), os.O_RDWR | os.O_CREAT, 0o644)
    journal = os.open(os.path.join(directory, "journal"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        zeros = bytes(PREALLOCATION_STEP)
        os.pwrite(journal, zeros, 0)
        os.fdatasync(journal)
        allocated = PREALLOCATION_STEP
        dropped = 0
        used = 0.0
        for i in range(groups):
            if gap_s:
                time.sleep(gap_s)
            start = _thread_cpu()
            offset = i * GROUP_BYTES
            os.pwrite(ledger, data, offset)
            if offset + GROUP_BYTES > allocated:
                os.pwrite(journal, zeros, allocated)
                allocated += PREALLOCATION_STEP
            os.pwrite(journal, data, offset)
            if sync:
                os.fdatasync(journal)
            # As LedgerFile.uncache does it.
            end = offset + GROUP_BYTES
            end -= end % mmap.PAGESIZE
            if end - dropped >= UNCACHE_STEP:
                back = max(0, dropped - PREALLOCATION_STEP)
                os.posix_fadvise(journal, back, end - back, os.POSIX_FADV_DONTNEED)
                dropped = end
            used += _thread_cpu() - start
        return used / groups
    finally:
        os.close(ledger)
        os.close(journal)


def fdatasync_percentiles(samples: int, directory: str) -> tuple[float, float, float]:
    """p50, p99 and p99.9 in ms of appending 300 B to a preallocated file and
    fdatasync, one at a time, as a lone receipt waits for it."""
    path = os.path.join(directory, "fdatasync-probe")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, bytes(PREALLOCATION_STEP), 0)
        os.fdatasync(fd)
        record = os.urandom(300)
        times = []
        for i in range(samples):
            start = time.perf_counter()
            os.pwrite(fd, record, (i * 300) % (PREALLOCATION_STEP - 300))
            os.fdatasync(fd)
            times.append((time.perf_counter() - start) * 1000)
    finally:
        os.close(fd)
        os.unlink(path)
    times.sort()
    return (
        times[samples // 2],
        times[int(samples * 0.99)],
        times[min(samples - 1, int(samples * 0.999))],
    )


def loop_floor(frames: int) -> float:
    """CPU seconds per frame of a uvloop thread that only reads and replies."""
    ready = threading.Event()
    finished = threading.Event()
    port: list[int] = []
    cpu: list[float] = []

    class Receiver(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = cast(asyncio.WriteTransport, transport)
            self.pending = 0
            self.seen = 0
            self.started = _thread_cpu()

        def data_received(self, data: bytes) -> None:
            self.pending += len(data)
            while self.pending >= GROUP_BYTES:
                self.pending -= GROUP_BYTES
                self.seen += 1
                self.transport.write(REPLY)
            if self.seen == frames:
                cpu.append(_thread_cpu() - self.started)
                finished.set()

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(Receiver, "127.0.0.1", 0)
        port.append(server.sockets[0].getsockname()[1])
        ready.set()
        await loop.run_in_executor(None, finished.wait)
        server.close()

    thread = threading.Thread(target=uvloop.run, args=(serve(),), daemon=True)
    thread.start()
    ready.wait()
    payload = os.urandom(GROUP_BYTES)
    with socket.create_connection(("127.0.0.1", port[0])) as conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sent = replied = 0
        buffered = 0
        while replied < frames:
            while sent < frames and sent - replied < IN_FLIGHT:
                conn.sendall(payload)
                sent += 1
            buffered += len(conn.recv(65536))
            replied, buffered = replied + buffered // len(REPLY), buffered % len(REPLY)
    finished.wait()
    thread.join()
    return cpu[0] / frames


def _storage_in_new_dir(groups: int, sync: bool = True, gap_s: float = 0.0) -> float:
    """storage_floor in a fresh temporary directory (no earlier run's files)."""
    with tempfile.TemporaryDirectory(prefix="magnetar-floor-") as directory:
        return storage_floor(groups, directory, sync, gap_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench floor", description=__doc__)
    parser.add_argument("--groups", type=int, default=1000, help="groups/frames per run")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    per_message = 1e6 / MESSAGES_PER_GROUP
    storage: list[float] = []
    # (fsync, none) at B's pace: a group every PACED_GAP_S.
    paced: list[tuple[float, float]] = []
    loop: list[float] = []
    for _ in range(args.rounds):
        storage.append(_storage_in_new_dir(args.groups) * per_message)
        synced = _storage_in_new_dir(PACED_GROUPS, True, PACED_GAP_S)
        bare = _storage_in_new_dir(PACED_GROUPS, False, PACED_GAP_S)
        paced.append((synced * per_message, bare * per_message))
        loop.append(loop_floor(args.groups) * per_message)
    storage.sort()
    paced.sort(key=lambda p: p[0] - p[1])
    loop.sort()
    mid = args.rounds // 2
    print(f"storage floor (fsync): {storage[mid]:.3f} us/msg  (rounds: "
          f"{', '.join(f'{v:.3f}' for v in storage)})")  # fmt: skip
    synced, bare = paced[mid]
    print(f"at a group every {PACED_GAP_S * 1000:.0f} ms: {synced:.3f} us/msg, of it the "
          f"fdatasync {synced - bare:.3f} (the same writes without it: {bare:.3f})")  # fmt: skip
    print(f"event-loop floor:      {loop[mid]:.3f} us/msg  (rounds: "
          f"{', '.join(f'{v:.3f}' for v in loop)})")  # fmt: skip
    print(f"sum:                   {storage[mid] + loop[mid]:.3f} us/msg")
    with tempfile.TemporaryDirectory(prefix="magnetar-floor-") as directory:
        p50, p99, p999 = fdatasync_percentiles(2000, directory)
    print(f"fdatasync of 300 B:    p50 {p50:.3f} ms, p99 {p99:.3f} ms, p99.9 {p999:.3f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
