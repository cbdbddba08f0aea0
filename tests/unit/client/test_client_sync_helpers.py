"""The blocking facade's plumbing: the loop thread, the submitter, the permits."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from magnetar.client.sync import LoopThread, Permits, Submitter


def test_loop_thread_runs_coroutines_and_stops() -> None:
    loop_thread = LoopThread()
    try:

        async def where() -> str:
            await asyncio.sleep(0)
            return threading.current_thread().name

        assert loop_thread.run(where()) == "magnetar-client"

        async def boom() -> None:
            raise KeyError("x")

        with pytest.raises(KeyError):
            loop_thread.run(boom())
    finally:
        loop_thread.stop()
        loop_thread.stop()  # idempotent
    assert loop_thread.loop.is_closed()


def test_submitter_keeps_order_across_threads() -> None:
    loop_thread = LoopThread()
    seen: list[int] = []
    done = threading.Event()
    try:
        submitter = Submitter(loop_thread.loop)
        for i in range(10_000):
            submitter.submit(seen.append, i)
        submitter.submit(lambda: done.set())
        assert done.wait(5)
        assert seen == list(range(10_000))
    finally:
        loop_thread.stop()


def test_permits_fail_fast_or_block_until_released() -> None:
    permits = Permits(2)
    assert permits.acquire(False) and permits.acquire(False)
    assert not permits.acquire(False)
    acquired = threading.Event()

    def blocked() -> None:
        permits.acquire(True)
        acquired.set()

    thread = threading.Thread(target=blocked)
    thread.start()
    time.sleep(0.05)
    assert not acquired.is_set()
    permits.release()
    assert acquired.wait(2)
    thread.join()
    assert permits.used == 2
    assert Permits(0).limit > 10**12  # 0 means unlimited
