"""A cluster on object storage (issue 42): three brokers on loopback that
share etcd and a bucket but no directory. A broker lost with its machine
(SIGKILL, then its directory deleted) loses nothing: its topics are taken
over from the metadata store and the objects alone (DESIGN "Processes")."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster.cluster_support import ClusterBroker
from tests.integration.cluster.conftest import LEASE_SECONDS, BrokerMaker
from tests.integration.cluster.test_cluster_moves import lose_a_broker_under_load
from tests.support.etcd import EtcdServer
from tests.support.seaweedfs import (
    SeaweedServer,
    object_store_url,  # noqa: F401  (a fixture: s3://bucket/prefix with credentials set)
    seaweedfs,  # noqa: F401  (a fixture: the session's SeaweedFS)
)

pytestmark = [pytest.mark.slow, pytest.mark.official]


@pytest.fixture
def object_cluster(
    etcd: EtcdServer,
    seaweedfs: SeaweedServer,  # noqa: F811
    object_store_url: str,  # noqa: F811
    tmp_path: Path,
) -> Iterator[BrokerMaker]:
    """Cluster brokers on the test's bucket prefix, each with a directory of
    its own."""
    started: list[ClusterBroker] = []

    def make(**settings: object) -> ClusterBroker:
        settings.setdefault("cluster_lease_seconds", LEASE_SECONDS)
        settings.setdefault("cluster_load_report_interval_seconds", 1)
        settings.setdefault("log_format", "json")
        settings.setdefault("storage", "object")
        settings.setdefault("object_store_url", object_store_url)
        settings.setdefault("object_store_endpoint", seaweedfs.endpoint)
        n = len(started)
        broker = ClusterBroker(
            etcd.url, tmp_path / f"machine-{n}", tmp_path / f"broker-{n}.log", **settings
        )
        started.append(broker)
        return broker.start()

    yield make
    for broker in started:
        broker.stop()


def test_a_lost_machine_loses_no_acknowledged_message(object_cluster: BrokerMaker) -> None:
    """SIGKILL a broker under load and delete its directory: its topics come
    back on the others, every acknowledged message is stored once and in
    order, and the consumers got each (dedup on, send timeout 0)."""
    brokers = [object_cluster(broker_deduplication_enabled="true") for _ in range(3)]
    dirs = {b.data_dir for b in brokers}
    assert len(dirs) == 3  # nothing shared but etcd and the bucket

    def lose_the_machine(victim: ClusterBroker) -> None:
        victim.kill()
        shutil.rmtree(victim.data_dir)

    lose_a_broker_under_load(brokers, lose_the_machine)
