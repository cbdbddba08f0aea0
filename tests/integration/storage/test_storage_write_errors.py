"""A write that fails (file size limit, as a full disk would) fails its receipts,
leaves the ledger as it was, and never loses what was acknowledged before.

Runs in a child process: the limit (RLIMIT_FSIZE) applies to a whole process.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

CHILD = r"""
import asyncio, resource, signal, sys
from magnetar.broker.storage import (
    EARLIEST, FileManagedLedgerFactory, ManagedLedgerConfig, StorageError, SyncPolicy,
)

async def main(data_dir, policy):
    factory = await FileManagedLedgerFactory.create(data_dir)
    config = ManagedLedgerConfig(sync_policy=SyncPolicy(policy))
    ml = await factory.open("t/n/persistent/full", config)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # get EFBIG instead of a signal
    limit = 64 * 1024
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
    ok, failed = [], 0
    for i in range(200):
        try:
            ok.append((await ml.add_entry(b"%05d" % i + b"x" * 995), i))
        except StorageError:
            failed += 1
    entries = await ml.read_entries(EARLIEST, 1000)
    assert [e.position for e in entries] == [p for p, _ in ok], "stored != acknowledged"
    assert all(e.data[:5] == b"%05d" % i for e, (_, i) in zip(entries, ok)), "bytes differ"
    resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    after = await ml.add_entry(b"after")  # the ledger still takes appends
    await factory.close()
    factory = await FileManagedLedgerFactory.create(data_dir)
    ml = await factory.open("t/n/persistent/full", config)
    again = await ml.read_entries(EARLIEST, 1000)
    assert [e.position for e in again] == [p for p, _ in ok] + [after]
    await factory.close()
    print(len(ok), failed)

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


@pytest.mark.parametrize("policy", ["fsync", "none"])
async def test_failed_writes_fail_their_receipts_and_keep_the_rest(
    tmp_path: Path, policy: str
) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        CHILD,
        str(tmp_path),
        policy,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    # The last line: an info log (trimming, say) may come before it.
    stored, failed = map(int, out.decode().strip().splitlines()[-1].split())
    assert stored >= 50  # up to the limit
    assert failed > 0  # then writes failed
    assert stored + failed == 200
