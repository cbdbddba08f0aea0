"""Fixtures: a real etcd and a factory of cluster broker processes sharing
one data directory; every process is stopped after the test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.integration.cluster.cluster_support import ClusterBroker
from tests.support.etcd import (
    EtcdServer,
    etcd,  # noqa: F401  (a fixture: a real etcd server)
)

# Short leases: a crashed broker's bundles move within seconds.
LEASE_SECONDS = 2

BrokerMaker = Callable[..., ClusterBroker]


@pytest.fixture
def cluster_broker(etcd: EtcdServer, tmp_path: Path) -> Iterator[BrokerMaker]:  # noqa: F811
    started: list[ClusterBroker] = []

    def make(**settings: object) -> ClusterBroker:
        settings.setdefault("cluster_lease_seconds", LEASE_SECONDS)
        settings.setdefault("cluster_load_report_interval_seconds", 1)
        settings.setdefault("log_format", "json")
        broker = ClusterBroker(
            etcd.url,
            tmp_path / "data",
            tmp_path / f"broker-{len(started)}.log",
            **settings,
        )
        started.append(broker)
        return broker.start()

    yield make
    for broker in started:
        broker.stop()
