"""Coroutines started at once, in the caller's callback, rather than by a task
from the next turn of the event loop.

A task costs its creation and a turn of the loop before its coroutine runs,
and another turn to wake whoever awaits it. LOOKUP and PARTITIONED_METADATA
nearly always finish without waiting (their answers are cached), and so does
loading a new topic; each new topic of the official clients asks both before
its PRODUCER: run at once, the two answered in half the time (issue 43). A
coroutine that does wait is stepped on by a task from there, as asyncio's
own task would (Python 3.12's eager tasks do the same; this broker runs on
3.11).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Done(Generic[T]):
    """A coroutine started at once that returned without waiting."""

    __slots__ = ("value",)

    def __init__(self, value: T) -> None:
        self.value = value


def start_eagerly(coro: Coroutine[Any, Any, T]) -> asyncio.Task[T] | Done[T]:
    """Run `coro` up to its first wait now; a task runs the rest (returned).
    Done(value) when it returned at once. An exception it raises before its
    first wait is raised here."""
    try:
        waiting = coro.send(None)
    except StopIteration as stop:
        return Done(stop.value)
    return asyncio.get_running_loop().create_task(_step_on(coro, waiting))


def run_request(
    tasks: set[asyncio.Task[None]], coro: Coroutine[Any, Any, None], eager: bool
) -> asyncio.Task[None] | None:
    """Start a request handler (one that catches its own errors): in a task,
    or (`eager`) at once; a task is kept in `tasks` until it is done. The
    task that runs it on, None when it finished at once."""
    task = start_eagerly(coro) if eager else asyncio.get_running_loop().create_task(coro)
    if isinstance(task, Done):
        return None
    tasks.add(task)
    task.add_done_callback(tasks.discard)
    return task


async def _step_on(coro: Coroutine[Any, Any, T], waiting: Any) -> T:
    """Resume `coro` each time what it waits for is done, until it returns."""
    while True:
        error: BaseException | None = None
        try:
            if waiting is None:
                await asyncio.sleep(0)  # a bare yield: the next turn of the loop
            elif asyncio.isfuture(waiting):
                waiting._asyncio_future_blocking = False
                await asyncio.wait([waiting])
            else:
                error = RuntimeError(f"a coroutine yielded {waiting!r}, not a future")
        except asyncio.CancelledError as exc:
            # As a task would: what it waits for is cancelled, then it is.
            waiting.cancel()
            error = exc
        try:
            waiting = coro.send(None) if error is None else coro.throw(error)
        except StopIteration as stop:
            result: T = stop.value
            return result
