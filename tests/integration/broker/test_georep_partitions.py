"""Geo-replication of partitioned topics, and replication stopped by a
policy change (issue 45.2)."""

from __future__ import annotations

from typing import Any

import pulsar
import pytest

from tests.support.brokers import BrokerThread
from tests.support.georep import admin
from tests.support.http_calls import http_call
from tests.support.official import official_client
from tests.support.polling import eventually


def _partition(msg: Any) -> int:
    return int(msg.topic_name().rsplit("-partition-", 1)[1])


def _partitions(broker: BrokerThread, path: str) -> int:
    status, answer = http_call("GET", broker.http_url + path)
    return int(answer["partitions"]) if status == 200 and answer else 0


def test_partitioned_topic_replicates_partition_by_partition(
    linked_pair: tuple[BrokerThread, BrokerThread],
) -> None:
    """Issue 45.2: a partitioned topic made on A only is created on B with the
    same partition count, and each message lands in the same partition there."""
    a, b = linked_pair
    topic = "persistent://public/geo/orders"
    path = "/admin/v2/persistent/public/geo/orders/partitions"
    admin(a, "PUT", path, 3)
    with official_client(a.url) as client:
        local = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(30):
            producer.send(f"m{i}".encode(), partition_key=f"key-{i % 7}")
        where_a = {}
        for _ in range(30):
            msg = local.receive(timeout_millis=5000)
            where_a[msg.data()] = _partition(msg)

    eventually("B has the partitioned topic", lambda: _partitions(b, path) == 3)
    with official_client(b.url) as client:
        remote = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        where_b = {}
        for _ in range(30):
            msg = remote.receive(timeout_millis=15000)
            remote.acknowledge(msg)
            where_b[msg.data()] = _partition(msg)
        with pytest.raises(pulsar.Timeout):
            remote.receive(timeout_millis=300)
    assert where_b == where_a


def test_removing_a_cluster_stops_its_replicator(
    linked_pair: tuple[BrokerThread, BrokerThread],
) -> None:
    """Issue 45.2: when B leaves the namespace's replication clusters, A's
    replicator stops and its cursor pulsar.repl.b is deleted; messages sent
    after stay on A. Putting B back starts a new cursor at the end."""
    a, b = linked_pair
    topic = "persistent://public/geo/leaving"
    stats = f"{a.http_url}/admin/v2/persistent/public/geo/leaving/internalStats"
    with official_client(a.url) as client_a, official_client(b.url) as client_b:
        remote = client_b.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        producer = client_a.create_producer(topic, batching_enabled=False)
        producer.send(b"before")
        assert remote.receive(timeout_millis=15000).data() == b"before"
        admin(a, "POST", "/admin/v2/namespaces/public/geo/replication", ["a"])
        assert "pulsar.repl.b" not in http_call("GET", stats)[1]["cursors"]
        producer.send(b"while-away")
        admin(a, "POST", "/admin/v2/namespaces/public/geo/replication", ["a", "b"])
        assert "pulsar.repl.b" in http_call("GET", stats)[1]["cursors"]
        producer.send(b"after")
        assert remote.receive(timeout_millis=15000).data() == b"after"


def test_cursor_of_a_cluster_removed_while_unloaded_is_deleted(
    linked_pair: tuple[BrokerThread, BrokerThread],
) -> None:
    """Issue 45.2: B leaves the replication clusters while the topic is not
    loaded on A; when it loads again its cursor pulsar.repl.b is deleted (it
    would keep the topic's ledgers for ever)."""
    a, _b = linked_pair
    topic = "persistent://public/geo/unloaded"
    rest = f"{a.http_url}/admin/v2/persistent/public/geo/unloaded"
    with official_client(a.url) as client:
        client.create_producer(topic).send(b"x")
    assert "pulsar.repl.b" in http_call("GET", rest + "/internalStats")[1]["cursors"]
    assert http_call("PUT", rest + "/unload")[0] == 204
    admin(a, "POST", "/admin/v2/namespaces/public/geo/replication", ["a"])
    assert "pulsar.repl.b" not in http_call("GET", rest + "/internalStats")[1]["cursors"]


def test_topic_level_replication_clusters_win(
    linked_pair: tuple[BrokerThread, BrokerThread],
) -> None:
    """Issue 45.1: a topic's own replication clusters win over its
    namespace's, both ways: [a] keeps a topic local in a namespace that
    replicates, [a, b] replicates a topic of a namespace that does not;
    removing the override inherits again."""
    a, b = linked_pair
    admin(a, "PUT", "/admin/v2/namespaces/public/local")
    admin(b, "PUT", "/admin/v2/namespaces/public/local")
    kept = "persistent://public/geo/kept-here"
    sent = "persistent://public/local/sent-anyway"
    admin(a, "POST", "/admin/v2/persistent/public/geo/kept-here/replication", ["a"])
    admin(a, "POST", "/admin/v2/persistent/public/local/sent-anyway/replication", ["a", "b"])
    earliest = pulsar.InitialPosition.Earliest
    with official_client(a.url) as client_a, official_client(b.url) as client_b:
        on_b_kept = client_b.subscribe(kept, "s", initial_position=earliest)
        on_b_sent = client_b.subscribe(sent, "s", initial_position=earliest)
        client_a.create_producer(kept).send(b"stays")
        client_a.create_producer(sent).send(b"goes")
        assert on_b_sent.receive(timeout_millis=15000).data() == b"goes"
        with pytest.raises(pulsar.Timeout):
            on_b_kept.receive(timeout_millis=500)
        admin(a, "DELETE", "/admin/v2/persistent/public/geo/kept-here/replication")
        client_a.create_producer(kept).send(b"now-replicated")
        # The cursor starts when replication does: the earlier message stays.
        assert on_b_kept.receive(timeout_millis=15000).data() == b"now-replicated"
