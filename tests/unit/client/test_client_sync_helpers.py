"""The blocking facade's plumbing: the loop thread, the submitter, the permits."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from magnetar.client.sync.loop import AppEvents, LoopThread, Permits, Submitter, ThreadQueue


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


def test_app_events_hand_deliveries_over_before_acks_in_bulk() -> None:
    """SEM-3.6: a message's delivery (which starts its ack timeout) reaches the
    loop no later than its ack; every event arrives once."""
    loop_thread = LoopThread()
    calls: list[tuple[str, list[int]]] = []
    done = threading.Event()
    try:
        submitter = Submitter(loop_thread.loop)
        events: AppEvents[int, int] = AppEvents(
            submitter,
            lambda items: calls.append(("delivered", items)),
            lambda items: calls.append(("acked", items)),
        )
        for i in range(1000):
            events.delivered(i)
            events.acked(i)
        events.delivered_many([1000, 1001])
        submitter.submit(done.set)
        assert done.wait(5)
    finally:
        loop_thread.stop()
    delivered_so_far: set[int] = set()
    for kind, items in calls:
        if kind == "delivered":
            delivered_so_far.update(items)
        else:
            assert set(items) <= delivered_so_far
    assert sorted(i for kind, items in calls if kind == "acked" for i in items) == list(range(1000))
    assert sorted(i for kind, items in calls if kind == "delivered" for i in items) == list(
        range(1002)
    )


def test_thread_queue_takes_in_bulk_and_gives_back_in_order() -> None:
    queue: ThreadQueue[int] = ThreadQueue()
    queue.put_many([1, 2, 3, 4, 5])
    assert queue.take(2) == [1, 2]
    taken = queue.take(0)
    assert taken == [3, 4, 5]
    queue.give_back(taken[1:])
    assert queue.take(10) == [4, 5]
    assert not queue.wait(0.01)


def test_submitter_goes_on_after_a_failing_call() -> None:
    """A call that raises is logged; the calls after it, and later submits, still run."""
    loop_thread = LoopThread()
    seen: list[int] = []
    first, second = threading.Event(), threading.Event()

    def boom() -> None:
        raise ValueError("the application's mistake")

    try:
        submitter = Submitter(loop_thread.loop)
        submitter.submit(seen.append, 1)
        submitter.submit(boom)
        submitter.submit(seen.append, 2)
        submitter.submit(first.set)
        assert first.wait(5)
        submitter.submit(seen.append, 3)
        submitter.submit(second.set)
        assert second.wait(5)
        assert seen == [1, 2, 3]
    finally:
        loop_thread.stop()
