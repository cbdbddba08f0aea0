"""Prometheus metrics of the storage layer (process-wide, all managed ledgers).

Updated once per group written or read, never per entry. They belong to no
registry until the broker calls :func:`register` with its own; per-ledger numbers
are in each ledger's ``stats`` for export with topic labels.
"""

from __future__ import annotations

import contextlib
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from magnetar.broker.storage.api import WRITE_LATENCY_BOUNDS, WriteStats


class WriteTotals:
    """The counters a group commit adds to, kept as plain ints and read when
    scraped: a round of 1,000 topics' groups made 3,000 locked
    prometheus_client increments, a few microseconds each (issue 48)."""

    def __init__(self) -> None:
        self.entries = 0
        self.bytes = 0
        self.groups = 0


TOTALS = WriteTotals()


class _WriteTotalsCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily(
            "magnetar_storage_entries_written", "Entries appended", value=TOTALS.entries
        )
        yield CounterMetricFamily(
            "magnetar_storage_bytes_written", "Entry bytes appended", value=TOTALS.bytes
        )
        yield CounterMetricFamily(
            "magnetar_storage_write_groups",
            "Group commits (one write, one fsync under fsync each)",
            value=TOTALS.groups,
        )


WRITE_TOTALS = _WriteTotalsCollector()
WRITE_SECONDS = Histogram(
    "magnetar_storage_write_seconds",
    "Time of one group commit: write (and fsync), queueing for the I/O thread included",
    buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0),
    registry=None,
)
INLINE_ROUNDS = Counter(
    "magnetar_storage_inline_rounds",
    "Journal rounds written on the event loop (small: no hop to the I/O thread)",
    registry=None,
)
RING_ROUNDS = Counter(
    "magnetar_storage_ring_rounds",
    "Journal rounds written on the event loop and fdatasynced through io_uring",
    registry=None,
)
NEW_LEDGER_FILES = Counter(
    "magnetar_storage_new_ledger_files",
    "New ledgers' directories and first files made, by way (ring: io_uring; thread)",
    ["via"],
    registry=None,
)
WRITE_ERRORS = Counter("magnetar_storage_write_errors", "Group commits that failed", registry=None)
CACHE_READS = Counter(
    "magnetar_storage_cache_reads", "Reads served by the entry cache", registry=None
)
DISK_READS = Counter(
    "magnetar_storage_disk_reads", "Reads that went to a ledger file", registry=None
)
DISK_READ_BYTES = Counter(
    "magnetar_storage_disk_read_bytes", "Record bytes read from files", registry=None
)
ROLLOVERS = Counter(
    "magnetar_storage_ledger_rollovers", "Ledgers closed for a new one", registry=None
)
LEDGERS_TRIMMED = Counter(
    "magnetar_storage_ledgers_trimmed", "Ledgers deleted by trimming", registry=None
)
OBJECT_REQUESTS = Counter(
    "magnetar_object_store_requests",
    "Object store requests by kind (put, get, head, list, delete), failed ones included",
    ["kind"],
    registry=None,
)
OBJECT_ERRORS = Counter(
    "magnetar_object_store_errors",
    "Object store requests that failed after the client's own retries, by kind",
    ["kind"],
    registry=None,
)
OBJECT_BYTES = Counter(
    "magnetar_object_store_bytes",
    "Object bytes moved, by direction (read, written)",
    ["direction"],
    registry=None,
)
OBJECT_SECONDS = Histogram(
    "magnetar_object_store_request_seconds",
    "Time of one successful object store request, by kind",
    ["kind"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0),
    registry=None,
)

ALL: tuple[Collector, ...] = (
    WRITE_TOTALS,
    WRITE_SECONDS,
    INLINE_ROUNDS,
    RING_ROUNDS,
    NEW_LEDGER_FILES,
    WRITE_ERRORS,
    CACHE_READS,
    DISK_READS,
    DISK_READ_BYTES,
    ROLLOVERS,
    LEDGERS_TRIMMED,
    OBJECT_REQUESTS,
    OBJECT_ERRORS,
    OBJECT_BYTES,
    OBJECT_SECONDS,
)


def register(registry: CollectorRegistry) -> None:
    """Expose the storage metrics through ``registry`` (idempotent per registry)."""
    for collector in ALL:
        with contextlib.suppress(ValueError):  # already there
            registry.register(collector)


class LatencyBuckets:
    """A histogram in plain integers, filled once per group commit and read by
    the metrics collector at scrape time (no lock, no per-entry work)."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...] = WRITE_LATENCY_BOUNDS) -> None:
        self.bounds = bounds
        # One count per bound, plus the overflow; not cumulative.
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(self.bounds, seconds)] += 1
        self.sum += seconds

    @property
    def count(self) -> int:
        return sum(self.counts)


@dataclass(slots=True)
class LedgerStats:
    """One managed ledger's counters, for metrics and tests."""

    groups_written: int = 0
    entries_written: int = 0
    bytes_written: int = 0
    cache_reads: int = 0
    disk_reads: int = 0
    disk_read_entries: int = 0
    rollovers: int = 0
    # Per group commit: from its oldest entry queued to durable.
    write_latency: LatencyBuckets = field(default_factory=LatencyBuckets)

    def snapshot(self) -> WriteStats:
        latency = self.write_latency
        return WriteStats(
            self.entries_written, self.bytes_written, tuple(latency.counts), latency.sum
        )
