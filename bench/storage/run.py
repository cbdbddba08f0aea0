"""Storage benchmark (``python -m bench storage``).

Prints append throughput for 100 B and 1 KiB entries with 1 and 100 concurrent
appenders under each sync policy, read throughput from the entry cache and from
disk (catch-up, page cache dropped first), and the peak RSS. Data goes to a
temporary directory that is removed at the end. ``--quick`` shortens each case.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import resource
import shutil
import tempfile
import time

import structlog

from magnetar.broker.storage import (
    EARLIEST,
    FileManagedLedgerFactory,
    InitialPosition,
    ManagedLedgerConfig,
    SyncPolicy,
)
from magnetar.broker.storage.ledger import ManagedLedgerImpl

MiB = 1024 * 1024


def _install_uvloop() -> str:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        return "asyncio"
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return "uvloop"


async def bench_append(
    factory: FileManagedLedgerFactory,
    name: str,
    size: int,
    appenders: int,
    policy: SyncPolicy,
    seconds: float,
) -> str:
    config = ManagedLedgerConfig(sync_policy=policy, sync_interval_ms=10)
    ml = await factory.open_impl(name, config)
    source = bytearray(os.urandom(size))
    stop = False
    count = 0

    async def appender() -> None:
        nonlocal count
        add = ml.add_entry
        while not stop:
            # A fresh bytes object per entry, as the broker passes: the cache
            # then holds real memory and the peak RSS means something.
            await add(bytes(source))
            count += 1

    tasks = [asyncio.ensure_future(appender()) for _ in range(appenders)]
    await asyncio.sleep(min(0.2, seconds / 5))  # warm up
    groups0, count0, t0 = ml.stats.groups_written, count, time.perf_counter()
    await asyncio.sleep(seconds)
    n, elapsed = count - count0, time.perf_counter() - t0
    groups = ml.stats.groups_written - groups0
    stop = True
    await asyncio.gather(*tasks)
    await ml.delete()
    rate = n / elapsed
    return (
        f"append  {size:>5} B  appenders={appenders:<3}  sync={policy.value:<8}"
        f"  {rate:>10,.0f} appends/s  {rate * size / MiB:>7.1f} MB/s"
        f"  {groups / elapsed:>7,.0f} writes/s  {n / max(groups, 1):>5.1f} entries/write"
    )


async def bench_reads(factory_dir: str, size: int, total_bytes: int) -> list[str]:
    lines = []
    batch = 1000
    count = max(1, total_bytes // size // batch) * batch
    data = os.urandom(size)
    name = f"bench/reads/{size}"
    # Fill with sync policy none (the write path is not measured here).
    cfg = ManagedLedgerConfig(sync_policy=SyncPolicy.NONE, entry_cache_size=total_bytes + 64 * MiB)
    factory = await FileManagedLedgerFactory.create(factory_dir, cfg)
    try:
        ml = await factory.open_impl(name, cfg)
        await ml.open_cursor("hold", InitialPosition.EARLIEST)  # keeps the data from trimming
        for _ in range(count // batch):
            await asyncio.gather(*[ml.add_entry(data) for _ in range(batch)])
        rate = await _read_all(ml, count, size)
        assert ml.stats.disk_reads == 0
        lines.append(
            f"read    {size:>5} B  from cache (no copy)   {rate:>10,.0f} MB/s"
            f"  {rate * MiB / size:>12,.0f} entries/s"
        )
    finally:
        await factory.close()
    # A restarted broker catching up: nothing cached, the OS page cache dropped.
    factory = await FileManagedLedgerFactory.create(factory_dir, cfg)
    try:
        ml = await factory.open_impl(name, cfg)
        for info in ml.layout.infos():
            _drop_page_cache(info.file.path)
        rate = await _read_all(ml, count, size)
        assert ml.stats.cache_reads == 0
        lines.append(
            f"read    {size:>5} B  from disk (catch-up)   {rate:>10,.0f} MB/s"
            f"  {rate * MiB / size:>12,.0f} entries/s"
        )
        await ml.delete()
    finally:
        await factory.close()
    return lines


async def _read_all(ml: ManagedLedgerImpl, count: int, size: int) -> float:
    cursor = ml.new_non_durable_cursor(EARLIEST)
    t0 = time.perf_counter()
    got = 0
    while True:
        entries = await cursor.read_entries(1000, 8 * MiB)
        if not entries:
            break
        got += len(entries)
    elapsed = time.perf_counter() - t0
    assert got == count, (got, count)
    await cursor.close()
    return count * size / MiB / elapsed


def _drop_page_cache(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


async def run(seconds: float, read_mib: int) -> None:
    root = tempfile.mkdtemp(prefix="magnetar-bench-storage-")
    try:
        factory = await FileManagedLedgerFactory.create(os.path.join(root, "append"))
        try:
            for policy in SyncPolicy:
                for size in (100, 1024):
                    for appenders in (1, 100):
                        name = f"bench/append/{policy.value}-{size}-{appenders}"
                        print(await bench_append(factory, name, size, appenders, policy, seconds))
        finally:
            await factory.close()
        for size in (1024, 16 * 1024):
            for line in await bench_reads(os.path.join(root, "reads"), size, read_mib * MiB):
                print(line)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench storage")
    parser.add_argument("--seconds", type=float, default=2.0, help="per append case")
    parser.add_argument("--read-mib", type=int, default=256, help="data read per read case")
    parser.add_argument("--quick", action="store_true", help="short cases (smoke run)")
    args = parser.parse_args(argv)
    seconds, read_mib = (0.3, 16) if args.quick else (args.seconds, args.read_mib)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    loop_name = _install_uvloop()
    print(
        f"storage benchmark: event loop {loop_name}, {os.cpu_count()} CPUs,"
        f" data under {tempfile.gettempdir()}"
    )
    started = time.perf_counter()
    asyncio.run(run(seconds, read_mib))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS {rss:,.0f} MiB; total {time.perf_counter() - started:.0f} s")
    return 0
