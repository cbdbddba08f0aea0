"""Running a crash test's child process until a SIGKILL (not a test module)."""

from __future__ import annotations

import asyncio
import signal
import sys


async def run_until_killed(child: str, args: list[str], lines: int, kill_after: float) -> list[str]:
    """The complete lines ``python child *args`` printed; it is killed with
    SIGKILL ``kill_after`` seconds after its first ``lines`` lines (a count,
    not a time: the machine may be busy)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, child, *args, stdout=asyncio.subprocess.PIPE
    )
    got: list[str] = []
    enough = asyncio.Event()

    async def pump() -> None:
        assert proc.stdout is not None
        while raw := await proc.stdout.readline():
            if raw.endswith(b"\n"):  # a line cut by the kill is not a report
                got.append(raw.decode().strip())
                if len(got) >= lines:
                    enough.set()

    pumping = asyncio.ensure_future(pump())
    try:
        await asyncio.wait_for(enough.wait(), 120)
        await asyncio.sleep(kill_after)
    finally:
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
        await pumping
    return got
