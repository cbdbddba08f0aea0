"""Two standalone brokers as the clusters of a geo-replication test (issue
45): each registered on the other through the admin REST API, tenant
`public` allowed on both, a namespace that replicates to both."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import pytest

from tests.support.brokers import BrokerFactory, BrokerThread
from tests.support.http_calls import http_call


class Cluster(Protocol):
    """A broker seen from a test: BrokerThread or BrokerProcess."""

    @property
    def url(self) -> str: ...

    @property
    def http_url(self) -> str: ...


def admin(cluster: Cluster, method: str, path: str, body: object = None) -> object:
    """An admin call that must succeed; its JSON answer."""
    status, answer = http_call(method, cluster.http_url + path, body)
    assert status in (200, 204), f"{method} {path}: {status} {answer}"
    return answer


def register(on: Cluster, name: str, remote: Cluster, **extra: object) -> None:
    """Register `remote` as cluster `name` on `on` (create, or update)."""
    data = {"serviceUrl": remote.http_url, "brokerServiceUrl": remote.url, **extra}
    status, _ = http_call("PUT", f"{on.http_url}/admin/v2/clusters/{name}", data)
    if status == 409:
        admin(on, "POST", f"/admin/v2/clusters/{name}", data)
    else:
        assert status == 204, status


def link(clusters: Mapping[str, Cluster], namespace: str = "public/geo") -> None:
    """Every cluster knows every other; `namespace` exists on each and
    replicates to all of them."""
    names = sorted(clusters)
    for here, broker in clusters.items():
        for there, remote in clusters.items():
            if there != here:
                register(broker, there, remote)
        admin(broker, "POST", "/admin/v2/tenants/public", {"allowedClusters": names})
        status, _ = http_call("PUT", f"{broker.http_url}/admin/v2/namespaces/{namespace}", {})
        assert status in (204, 409), status
        admin(broker, "POST", f"/admin/v2/namespaces/{namespace}/replication", names)


@pytest.fixture
def linked_pair(broker_factory: BrokerFactory) -> tuple[BrokerThread, BrokerThread]:
    """Two brokers as clusters "a" and "b", linked (a namespace public/geo
    that replicates to both)."""
    a, b = broker_factory(cluster_name="a"), broker_factory(cluster_name="b")
    link({"a": a, "b": b})
    return a, b
