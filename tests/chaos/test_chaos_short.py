"""Cluster mode under real faults (DESIGN "Cluster": one owner per bundle,
fencing, no receipt after a lost session), a short seeded run: brokers, a
3-member etcd and a client in their own network namespaces; broker/etcd and
broker/client partitions, a minority etcd member, pauses and kills while
producers (deduplication, send timeout 0) and acknowledging consumers run;
after healing, and again after every broker is killed and restarted, the
history checker finds no anomaly (tests/chaos/checker.py says what each one
means)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.chaos.netns import Network
from tests.chaos.run import run

pytestmark = [pytest.mark.slow, pytest.mark.official]

SECONDS = 60.0


# Above the workload's own bounded waits: a slow recovery is the checker's
# finding (slow-recovery, unfinished), not a pytest timeout.
@pytest.mark.timeout(720)
def test_a_short_fault_run_has_no_anomaly(network: Network, tmp_path: Path) -> None:
    seed = int(os.environ.get("CHAOS_SEED", "38"))
    outcome = run(network, tmp_path, SECONDS, seed)
    assert outcome.faults, "no fault was injected"
    assert outcome.report.acknowledged > 0
    assert outcome.report.ok, outcome.summary()
