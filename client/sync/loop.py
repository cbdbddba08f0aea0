"""The private event-loop thread behind the blocking API.

`LoopThread` runs one event loop (uvloop when available) in a daemon thread
and runs coroutines on it for callers in other threads. `Submitter` batches
fire-and-forget calls into the loop: many `send_async` calls from the
application thread cost one loop wake-up, not one each.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, Generic, Protocol, TypeVar

from magnetar.client.aio.errors import Interrupted
from magnetar.client.aio.log import get_logger

_log = get_logger("magnetar.client")

R = TypeVar("R")


def new_event_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency off Windows
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


class LoopThread:
    def __init__(self, name: str = "magnetar-client") -> None:
        self.loop = new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._started = threading.Event()
        self._thread.start()
        self._started.wait()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._started.set)
        try:
            self.loop.run_forever()
        finally:
            pending = asyncio.all_tasks(self.loop)
            for task in pending:
                task.cancel()
            if pending:
                self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()

    @property
    def in_loop_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def run(self, coro: Coroutine[Any, Any, R], timeout: float | None = None) -> R:
        """Run `coro` on the loop and wait for its result (its exception is raised here)."""
        if self.in_loop_thread:
            coro.close()
            raise RuntimeError("blocking client call from inside the client's own loop thread")
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise

    def close_then_stop(self, coro: Coroutine[Any, Any, object], timeout: float) -> None:
        """Run `coro` (a close) for at most `timeout` seconds, then stop: how
        a client that was never closed ends when it is collected."""
        if not self._thread.is_alive() or self.loop.is_closed():
            coro.close()
            return
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        if not self.in_loop_thread:
            try:
                future.result(timeout)
            except BaseException:
                future.cancel()
        self.stop()

    def stop(self) -> None:
        """Stop the loop and join the thread (idempotent)."""
        if not self._thread.is_alive():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        if not self.in_loop_thread:
            self._thread.join()


class Submitter:
    """Runs callables on the loop, in submission order, with few wake-ups.

    Lock-free under the GIL: deque appends and pops are atomic, and the drain
    re-checks the queue after clearing `_scheduled`, so an item appended in
    between is never stranded (at worst a drain is scheduled twice).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._items: deque[tuple[Callable[..., object], tuple[Any, ...]]] = deque()
        self._scheduled = False

    def submit(self, fn: Callable[..., object], *args: Any) -> None:
        self._items.append((fn, args))
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        items = self._items
        while True:
            while items:
                fn, args = items.popleft()
                try:
                    fn(*args)
                except Exception as exc:  # one failed call must not strand the ones after it
                    _log.exception("submitted call failed", call=repr(fn), error=str(exc))
            self._scheduled = False
            if not items:
                return
            self._scheduled = True


class ClientLoop(Protocol):
    """What the blocking producers, consumers, readers and table views need
    from the Client that made them: its loop thread, and whether it is closed
    (the Client implements it; they do not import the Client)."""

    @property
    def closed(self) -> bool: ...
    @property
    def submitter(self) -> Submitter: ...
    def run(self, coro: Coroutine[Any, Any, R], timeout: float | None = None) -> R: ...
    def submit(self, fn: Callable[..., object], *args: Any) -> None: ...
    def run_ordered(self, make: Callable[[], Any]) -> Any: ...


class Permits:
    """A counting limit the application thread may wait on (block_if_queue_full)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit if limit > 0 else 1 << 62
        self.used = 0
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._waiting = 0

    def try_acquire(self) -> bool:
        with self._lock:
            if self.used < self.limit:
                self.used += 1
                return True
            return False

    def acquire(self, block: bool) -> bool:
        if self.try_acquire():
            return True
        if not block:
            return False
        with self._cond:
            while self.used >= self.limit:
                self._waiting += 1
                try:
                    self._cond.wait()
                finally:
                    self._waiting -= 1
            self.used += 1
            return True

    def release(self, count: int = 1) -> None:
        with self._lock:
            self.used -= count
            if self._waiting:
                self._cond.notify(count)


T = TypeVar("T")
A = TypeVar("A")


class AppEvents(Generic[T, A]):
    """Deliveries and acks from application threads, handed to the loop in bulk.

    The blocking consumer's receive and acknowledge append here (no lock, no
    loop wake-up per call); one drain on the loop, submitted through the
    Submitter so it keeps its order with the client's other calls, hands
    everything over at once. A message's delivery is always handed over no
    later than its ack: the drain takes the acks present first, then every
    delivery, which includes those of the acked messages.
    """

    def __init__(
        self,
        submitter: Submitter,
        on_delivered: Callable[[list[T]], object],
        on_acked: Callable[[list[A]], object],
    ) -> None:
        self._submitter = submitter
        self._on_delivered = on_delivered
        self._on_acked = on_acked
        self._delivered: deque[T] = deque()
        self._acked: deque[A] = deque()
        self._scheduled = False

    def delivered(self, item: T) -> None:
        self._delivered.append(item)
        if not self._scheduled:
            self._schedule()

    def delivered_many(self, items: list[T]) -> None:
        self._delivered.extend(items)
        if not self._scheduled:
            self._schedule()

    def acked(self, item: A) -> None:
        self._acked.append(item)
        if not self._scheduled:
            self._schedule()

    def hand_over(self, timeout: float) -> bool:
        """Wait (at most `timeout` seconds) until the loop has taken every event so far.

        Appending never wakes the loop at once: the application thread keeps
        the GIL for up to the interpreter's switch interval. When an event
        matters soon (enough permits freed for a FLOW), waiting here lets the
        loop run now, so the broker works while the application goes on.
        """
        done = threading.Event()
        if not self._scheduled:
            self._schedule()
        self._submitter.submit(done.set)
        return done.wait(timeout)

    def _schedule(self) -> None:
        self._scheduled = True
        self._submitter.submit(self._drain)

    def _drain(self) -> None:
        delivered, acked = self._delivered, self._acked
        try:
            while True:
                acks = [acked.popleft() for _ in range(len(acked))]
                deliveries = [delivered.popleft() for _ in range(len(delivered))]
                if deliveries:
                    self._on_delivered(deliveries)
                if acks:
                    self._on_acked(acks)
                self._scheduled = False
                if not acked and not delivered:
                    return
                self._scheduled = True
        except BaseException:
            self._scheduled = False  # the next event schedules a drain again
            raise


# A wait in the main thread wakes this often, so that a signal sent from
# another thread (which does not interrupt it) has its handler run.
_SIGNAL_CHECK_SECONDS = 0.1


def _signal_slice(remaining: float | None) -> float | None:
    if threading.current_thread() is not threading.main_thread():
        return remaining
    return _SIGNAL_CHECK_SECONDS if remaining is None else min(remaining, _SIGNAL_CHECK_SECONDS)


@contextlib.contextmanager
def _interruptible() -> Iterator[None]:
    """As the official client: a signal whose handler raises (SIGINT's
    default) ends a blocking wait with Interrupted."""
    try:
        yield
    except KeyboardInterrupt:
        raise Interrupted("interrupted while waiting") from None


class ThreadQueue(Generic[T]):
    """Items put on the loop thread and taken by application threads with no loop
    round trip (the blocking consumer's receive). close(error) makes an empty
    queue raise error() instead of waiting."""

    def __init__(self) -> None:
        self._items: deque[T] = deque()
        self._cond = threading.Condition(threading.Lock())
        self._waiting = 0
        self._error: Callable[[], BaseException] | None = None

    def __len__(self) -> int:
        return len(self._items)

    def put(self, item: T) -> None:
        with self._cond:
            self._items.append(item)
            if self._waiting:
                self._cond.notify()

    def put_many(self, items: list[T]) -> None:
        with self._cond:
            self._items.extend(items)
            if self._waiting:
                self._cond.notify_all()

    def clear(self) -> None:
        with self._cond:
            self._items.clear()

    def take(self, limit: int) -> list[T]:
        """Up to `limit` items (all when `limit` <= 0) in one step, without waiting."""
        with self._cond:
            items = self._items
            count = len(items)
            if count <= limit or limit <= 0:
                out = list(items)
                items.clear()
                return out
            return [items.popleft() for _ in range(limit)]

    def give_back(self, items: list[T]) -> None:
        """Put taken items back at the front, in their order."""
        with self._cond:
            self._items.extendleft(reversed(items))

    def wait(self, timeout: float | None) -> bool:
        """Wait until an item is there; False after `timeout` seconds without one."""
        if self._items:
            return True
        with _interruptible():
            return self._wait(timeout)

    def _wait(self, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not self._items:
                if self._error is not None:
                    raise self._error()
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._waiting += 1
                try:
                    self._cond.wait(_signal_slice(remaining))
                finally:
                    self._waiting -= 1
            return True

    def close(self, error: Callable[[], BaseException]) -> None:
        with self._cond:
            self._error = error
            self._cond.notify_all()

    def get(self, timeout: float | None) -> T | None:
        """The next item, or None after `timeout` seconds without one."""
        try:
            return self._items.popleft()
        except IndexError:
            pass
        with _interruptible():
            return self._get(timeout)

    def _get(self, timeout: float | None) -> T | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                try:
                    return self._items.popleft()
                except IndexError:
                    pass
                if self._error is not None:
                    raise self._error()
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                self._waiting += 1
                try:
                    self._cond.wait(_signal_slice(remaining))
                finally:
                    self._waiting -= 1
