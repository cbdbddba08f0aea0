"""The entry cache (SEM-5.5 as Pulsar keeps it): entries leave once every
active cursor has read them, once older than the time threshold, and oldest
first past the budget, which counts the memory they really take."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from magnetar.broker.storage import FileManagedLedgerFactory, ManagedLedgerConfig, Position
from magnetar.broker.storage.api import Entry
from magnetar.broker.storage.cache import CHUNK_OVERHEAD, ENTRY_OVERHEAD, EntryCacheManager

NAME = "public/default/persistent/cache"


def _chunk(ledger_id: int, first: int, sizes: list[int]) -> tuple[list[Entry], int]:
    entries = [
        Entry(Position(ledger_id, first + i), random.randbytes(size), 1)
        for i, size in enumerate(sizes)
    ]
    return entries, sum(sizes)


async def test_entries_every_active_cursor_has_read_leave_without_the_budget(
    tmp_path: Path,
) -> None:
    """A large budget and a long threshold: what the active cursors have read
    leaves at the next append or sweep; what one of them has not read stays."""
    f = await FileManagedLedgerFactory.create(
        str(tmp_path),
        ManagedLedgerConfig(entry_cache_size=64 << 20, cache_eviction_threshold_s=600.0),
    )
    try:
        ml = await f.open_impl(NAME)
        fast = await ml.open_cursor("fast")
        slow = await ml.open_cursor("slow")
        fast.set_active()
        slow.set_active()
        for i in range(10):
            await ml.add_entry(b"e%d" % i)
        assert len(await fast.read_entries(10)) == 10
        assert len(await slow.read_entries(4)) == 4
        f.cache.evict()
        # Entries 4.. are still to be read by the slow cursor.
        info = ml.layout.current
        assert info.cache.first_entry_id == 4 and len(info.cache) == 6
        assert (
            f.cache_used_bytes
            == sum(len(b"e%d" % i) for i in range(4, 10))
            + 6 * (ENTRY_OVERHEAD)
            + 6 * CHUNK_OVERHEAD
        )
        assert len(await slow.read_entries(10)) == 6
        await ml.add_entry(b"next")  # an append sweeps its own ledger first
        assert len(info.cache) == 1 and info.cache.first_entry_id == 10
        assert f.cache_used_bytes == len(b"next") + ENTRY_OVERHEAD + CHUNK_OVERHEAD
    finally:
        await f.close()


def test_entries_older_than_the_threshold_leave() -> None:
    """Pulsar's managedLedgerCacheEvictionTimeThresholdMillis: nobody has
    read them, the budget has room, and they go by age alone."""
    now = [100.0]
    manager = EntryCacheManager(1 << 30, time_threshold_s=1.0, clock=lambda: now[0])
    one, two = manager.new_cache(1), manager.new_cache(2)
    one.append(*_chunk(1, 0, [10, 10]))
    now[0] += 0.6
    two.append(*_chunk(2, 0, [10]))
    one.append(*_chunk(1, 2, [10]))
    manager.evict()
    assert (len(one), len(two)) == (3, 1)
    now[0] += 0.5  # the first chunk is 1.1 s old, the others 0.5 s
    manager.evict()
    assert (len(one), len(two)) == (1, 1) and one.first_entry_id == 2
    now[0] += 1.0
    manager.evict()
    assert (len(one), len(two)) == (0, 0) and manager.size == 0


def test_an_idle_cache_is_swept_rarely_and_its_first_entry_still_leaves_in_time() -> None:
    """The sweep looks at an empty cache once a threshold (an idle broker's
    timer wake-ups cost CPU), and an entry added right after that look still
    leaves by 1.1 times the threshold, as with the short step throughout."""
    now = [100.0]
    manager = EntryCacheManager(1 << 30, time_threshold_s=1.0, clock=lambda: now[0])
    cache = manager.new_cache(1)
    assert manager.sweep_interval() == 1.0
    now[0] += 0.001  # right after an idle look
    added = now[0]
    cache.append(*_chunk(1, 0, [10]))
    assert manager.sweep_interval() == pytest.approx(0.1)
    now[0] += 1.0 - 0.001  # the next look: 0.999 s old, it stays
    manager.evict()
    assert len(cache) == 1
    while len(cache):
        now[0] += manager.sweep_interval()
        manager.evict()
    assert now[0] - added <= 1.1 + 1e-9
    assert manager.sweep_interval() == 1.0  # empty again


@pytest.mark.parametrize("threshold", [0.001, 0.05, 0.5, 1.0, 7.5, 3600.0])
def test_the_sweep_steps_keep_the_age_bound(threshold: float) -> None:
    """The short step is a tenth of the threshold (at least 10 ms, at most
    1 s); the idle one never exceeds the threshold, so no entry added while
    the sweep waits can be old enough to leave before the short step resumes."""
    manager = EntryCacheManager(1 << 30, time_threshold_s=threshold)
    idle = manager.sweep_interval()
    manager.new_cache(1).append(*_chunk(1, 0, [10]))
    busy = manager.sweep_interval()
    assert busy == min(1.0, max(0.01, threshold / 10))
    assert busy <= idle <= max(busy, threshold)
    assert idle <= 1.0


# Run in a fresh interpreter: tracemalloc counts every thread's allocations,
# and in the whole suite the same loop once measured 160 KB more than alone.
_BUDGET_PROBE = """
import gc, json, random, tracemalloc
from magnetar.broker.storage import Position
from magnetar.broker.storage.api import Entry
from magnetar.broker.storage.cache import EntryCacheManager

budget = 2 << 20
rng = random.Random(7)
gc.collect()
tracemalloc.start()
manager = EntryCacheManager(budget, time_threshold_s=3600.0)
caches = [manager.new_cache(lid) for lid in range(3)]
next_id = [0, 0, 0]
baseline = tracemalloc.get_traced_memory()[0]
worst = 0
over = 0
for _ in range(3000):
    k = rng.randrange(3)
    sizes = [rng.choice((1, 30, 100, 300, 2000)) for _ in range(rng.randint(1, 40))]
    entries = [
        Entry(Position(k, next_id[k] + i), random.randbytes(size), 1)
        for i, size in enumerate(sizes)
    ]
    next_id[k] += len(sizes)
    caches[k].append(entries, sum(sizes))
    del entries
    worst = max(worst, tracemalloc.get_traced_memory()[0] - baseline)
    over = max(over, manager.size - budget)
print(json.dumps({"budget": budget, "worst": worst, "size": manager.size, "over": over}))
"""


def test_the_budget_holds_in_real_memory() -> None:
    """Whatever the entries' sizes, the memory the cache holds (measured by
    tracemalloc, the entries' objects included) stays within its budget."""
    out = subprocess.run(
        [sys.executable, "-c", _BUDGET_PROBE], capture_output=True, text=True, check=True
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    budget, worst = got["budget"], got["worst"]
    assert got["over"] <= 0, "the cache's own count went past its budget"
    assert worst <= budget, f"the cache held {worst} bytes against a budget of {budget}"
    # It was full: the bound is not met by holding little.
    assert got["size"] > budget * 0.9
