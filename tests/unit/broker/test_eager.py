"""broker/eager.py: coroutines run at once, a task taking over if they wait."""

from __future__ import annotations

import asyncio

import pytest

from magnetar.broker.eager import Done, run_request, start_eagerly


async def test_a_coroutine_that_does_not_wait_needs_no_task() -> None:
    ran: list[str] = []

    async def quick() -> int:
        ran.append("now")
        return 7

    started = start_eagerly(quick())
    assert ran == ["now"]  # before any turn of the loop
    assert isinstance(started, Done) and started.value == 7


async def test_one_that_waits_is_finished_by_a_task() -> None:
    gate: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    steps: list[object] = []

    async def slow() -> str:
        steps.append("started")
        steps.append(await gate)
        await asyncio.sleep(0)
        await asyncio.sleep(0.001)
        steps.append("done")
        return "result"

    started = start_eagerly(slow())
    assert steps == ["started"]
    assert isinstance(started, asyncio.Task)
    gate.set_result("opened")
    assert await started == "result"
    assert steps == ["started", "opened", "done"]


async def test_errors_before_and_after_the_first_wait() -> None:
    async def fails_now() -> None:
        raise ValueError("now")

    with pytest.raises(ValueError, match="now"):
        start_eagerly(fails_now())

    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def fails_later() -> None:
        await gate
        raise KeyError("later")

    started = start_eagerly(fails_later())
    assert isinstance(started, asyncio.Task)
    gate.set_exception(RuntimeError("the awaited one failed"))
    with pytest.raises(RuntimeError, match="awaited"):
        await started


async def test_cancelling_the_task_cancels_what_it_waits_for() -> None:
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    seen: list[str] = []

    async def waits() -> str:
        try:
            await gate
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        return "never"

    started = start_eagerly(waits())
    assert isinstance(started, asyncio.Task)
    await asyncio.sleep(0)
    started.cancel()
    with pytest.raises(asyncio.CancelledError):
        await started
    assert seen == ["cancelled"] and gate.cancelled()


async def test_run_request_keeps_a_task_only_while_it_runs() -> None:
    tasks: set[asyncio.Task[None]] = set()
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def handler(wait: bool) -> None:
        if wait:
            await gate

    run_request(tasks, handler(False), eager=True)
    assert tasks == set()
    run_request(tasks, handler(True), eager=True)
    run_request(tasks, handler(False), eager=False)
    assert len(tasks) == 2
    gate.set_result(None)
    await asyncio.gather(*list(tasks))
    await asyncio.sleep(0)
    assert tasks == set()
