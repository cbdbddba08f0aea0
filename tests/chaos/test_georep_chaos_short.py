"""Geo-replication under faults (issue 45), a short seeded run: two
clusters (standalone broker processes, fsync, deduplication on), producers
and consumers on both, partitions between them (both ways, one way, replies
swallowed), brokers killed and paused; after healing, and again after both
brokers are killed and restarted, each cluster's history is checked with
checker.py: every acknowledged send stored exactly once on both clusters,
in order per producer, and delivered on both (georep_run.py). No root
needed: the links are TCP proxies."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.chaos.georep_run import run

pytestmark = [pytest.mark.slow, pytest.mark.official]

SECONDS = 60.0
SEED = 108  # one fault of each kind in 60 s


# Above the workloads' own bounded waits: a slow recovery is the checker's
# finding (slow-recovery, unfinished), not a pytest timeout.
@pytest.mark.timeout(720)
def test_a_short_georep_fault_run_has_no_anomaly(tmp_path: Path) -> None:
    seed = int(os.environ.get("GEO_CHAOS_SEED", SEED))
    outcome = run(tmp_path, SECONDS, seed)
    assert len(outcome.kinds()) >= 2, outcome.faults
    for name, report in outcome.reports.items():
        assert report.acknowledged > 0, name
        assert report.stored >= report.acknowledged, name
    assert outcome.ok, outcome.summary()
