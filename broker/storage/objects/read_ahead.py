"""ReadAhead: the bytes fetched ahead of catch-up reads on object storage.

A consumer far behind reads a ledger front to back a few entries at a time.
A GET per read would pay the store's latency every time, so a read that
misses fetches a window (``window`` bytes of the ledger from where it
starts) and keeps it. A reader that comes back for more is going through
the ledger: from then on, while it is in one window the next is fetched in
the background (double buffering), so it finds that one there, the store's
latency hidden behind the reading of the current one. Windows of all
ledgers share one byte budget, least recently used first out.

The factory owns one ReadAhead; it owns the background fetches and cancels
and awaits them on close. Loop thread only.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import structlog

from magnetar.broker.storage.api import StorageError

log = structlog.get_logger(__name__)

# Fetched by a read that misses, and by each prefetch.
DEFAULT_WINDOW = 4 * 1024 * 1024
# For the windows of the whole broker, prefetches in flight included.
DEFAULT_BUDGET = 64 * 1024 * 1024

# (start, stop) -> the bytes of a ledger between them.
Fetcher = Callable[[int, int], Coroutine[Any, Any, bytes]]


class ReadAheadClosed(StorageError):
    """The broker is closing: reads on object storage end."""


@dataclass(slots=True)
class _Held:
    at: int = 0
    buf: bytes = b""
    # The next window, being fetched: its start, stop and task.
    next_at: int = 0
    next_stop: int = 0
    task: asyncio.Task[bytes] | None = None

    @property
    def end(self) -> int:
        return self.at + len(self.buf)


class ReadAhead:
    def __init__(self, window: int = DEFAULT_WINDOW, budget: int = DEFAULT_BUDGET) -> None:
        self.window = window
        self.budget = budget
        self.size = 0  # held windows plus prefetches in flight
        self.prefetch_hits = 0  # reads served by a window fetched ahead
        self._held: OrderedDict[object, _Held] = OrderedDict()
        self._closed = False

    async def read(
        self, owner: object, start: int, end: int, limit: int, fetch: Fetcher
    ) -> tuple[bytes, int]:
        """Bytes covering [start, end) of ``owner``'s ledger, which holds
        ``limit`` bytes, and the ledger offset they begin at."""
        if self._closed:
            raise ReadAheadClosed("the broker is closing")
        held = self._held.get(owner)
        if held is not None:
            self._held.move_to_end(owner)
            if not (held.at <= start and end <= held.end):
                await self._advance(held, start, end)
            if held.at <= start and end <= held.end:
                # Back for more: a reader going through the ledger.
                self._maybe_prefetch(owner, held, limit, fetch)
                return held.buf, held.at
        stop = max(end, min(limit, start + self.window))
        buf = await fetch(start, stop)
        if stop <= end or self._closed:
            return buf, start  # nothing beyond this read to keep
        held = self._held.get(owner)
        if held is None:
            held = self._held[owner] = _Held()
        self._replace(held, start, buf)
        self._evict(keep=owner)
        return buf, start

    async def _advance(self, held: _Held, start: int, end: int) -> None:
        """Move on to the prefetched window when it holds the read; a read
        that starts in the current window and ends in the next gets both."""
        task = held.task
        if task is None:
            return
        if not (held.at <= start and end <= held.next_stop and held.end == held.next_at):
            self._cancel(held)  # a seek elsewhere: that window is not wanted
            return
        at = held.next_at
        try:
            buf = await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.cancelled():
                raise  # our reader was cancelled, not the prefetch
            return
        except Exception:
            return  # fetched again by the read itself, which reports the error
        finally:
            if held.task is task:
                held.task = None
                self.size -= held.next_stop - held.next_at
        self.prefetch_hits += 1
        if start >= at:
            self._replace(held, at, buf)
        elif held.end == at and held.at <= start:  # unchanged while we waited
            self._replace(held, start, held.buf[start - held.at :] + buf)

    def _maybe_prefetch(self, owner: object, held: _Held, limit: int, fetch: Fetcher) -> None:
        if held.task is not None or self._closed:
            return
        if held.end >= limit:
            return  # the ledger's end is held
        at, stop = held.end, min(limit, held.end + self.window)
        self._evict(keep=owner, room=stop - at)
        if self.size + stop - at > self.budget:
            return  # the budget is taken by windows in use
        held.next_at, held.next_stop = at, stop
        held.task = asyncio.get_running_loop().create_task(
            fetch(at, stop), name=f"magnetar-read-ahead-{at}"
        )
        held.task.add_done_callback(_retrieve)
        self.size += stop - at

    def _replace(self, held: _Held, at: int, buf: bytes) -> None:
        self.size += len(buf) - len(held.buf)
        held.at, held.buf = at, buf

    def _evict(self, keep: object, room: int = 0) -> None:
        while self.size + room > self.budget:
            victim = next((k for k in self._held if k is not keep), None)
            if victim is None:
                return
            self.drop(victim)

    def _cancel(self, held: _Held) -> None:
        if held.task is not None:
            held.task.cancel()
            held.task = None
            self.size -= held.next_stop - held.next_at

    def drop(self, owner: object) -> None:
        """Forget ``owner``'s window (closed, trimmed, or a corrupt read)."""
        held = self._held.pop(owner, None)
        if held is not None:
            self._cancel(held)
            self.size -= len(held.buf)

    def tasks(self) -> list[asyncio.Task[bytes]]:
        """The prefetches in flight."""
        return [h.task for h in self._held.values() if h.task is not None]

    async def close(self) -> None:
        """Cancel and await the prefetches in flight; idempotent."""
        self._closed = True
        tasks = self.tasks()
        for owner in list(self._held):
            self.drop(owner)
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


def _retrieve(task: asyncio.Task[bytes]) -> None:
    # A failed prefetch is not an error of its own: the read that wanted the
    # window fetches it again and reports what fails then.
    if not task.cancelled() and task.exception() is not None:
        log.debug("read-ahead fetch failed", error=str(task.exception()))
