"""Cluster mode under real faults (DESIGN "Cluster": one owner per bundle,
fencing, no receipt after a lost session), short seeded runs: brokers, a
3-member etcd and a client in their own network namespaces; broker/etcd and
broker/client partitions, a minority etcd member, pauses and kills while
producers (deduplication, send timeout 0) and acknowledging consumers run;
after healing, and again after every broker is killed and restarted, the
history checker finds no anomaly (tests/chaos/checker.py says what each one
means). Once with the brokers sharing a data directory, once on object
storage (an S3 server in a namespace of its own), where the seed draws a
machine lost with its directory, the S3 server paused and a broker cut from
it."""

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
@pytest.mark.parametrize(("storage", "seed"), [("files", 38), ("object", 25)])
def test_a_short_fault_run_has_no_anomaly(
    network: Network, tmp_path: Path, storage: str, seed: int
) -> None:
    seed = int(os.environ.get("CHAOS_SEED", seed))
    outcome = run(network, tmp_path, SECONDS, seed, storage=storage)
    assert outcome.faults, "no fault was injected"
    if storage == "object" and "CHAOS_SEED" not in os.environ:
        assert any(f.startswith("machine-lost") for f in outcome.faults), outcome.faults
    assert outcome.report.acknowledged > 0
    assert outcome.report.ok, outcome.summary()
