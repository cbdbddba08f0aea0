"""Three broker processes on one etcd: topics spread over them, and the
official client follows LOOKUP redirects to each owner (DESIGN "Processes")."""

from __future__ import annotations

import functools
import re
import urllib.request

import pytest

from tests.integration.cluster.cluster_support import TIMEOUT, ClusterBroker
from tests.integration.cluster.conftest import BrokerMaker
from tests.support.http_calls import http_call
from tests.support.official import official_client
from tests.support.polling import eventually

pytestmark = [pytest.mark.slow, pytest.mark.official]

TOPICS = [f"persistent://public/default/spread-{i}" for i in range(20)]


def test_twenty_topics_spread_over_three_brokers(cluster_broker: BrokerMaker) -> None:
    """The client knows only the first broker; every broker ends up owning
    topics, so the client was redirected to the other two; every message
    published through one client is read back through another."""
    brokers = [cluster_broker() for _ in range(3)]
    with official_client(brokers[0].url) as client:
        producers = [client.create_producer(t) for t in TOPICS]
        # Names the brokers made up: one prefix per broker, none shared.
        names = [p.producer_name() for p in producers]
        assert len(set(names)) == len(names)
        prefixes = {name.rsplit("-", 1)[0] for name in names}
        assert len(prefixes) == len(brokers), names
        # The cluster's name and the broker's start number, unique in the cluster.
        assert all(re.fullmatch(r"standalone-[0-9a-f]+", p) for p in prefixes), prefixes
        for i, producer in enumerate(producers):
            for n in range(5):
                producer.send(f"{i}-{n}".encode())
        for producer in producers:
            producer.close()
    owned = {b.broker_id: b.ownership()["topics"] for b in brokers}
    assert all(owned.values()), owned
    assert sorted(t for topics in owned.values() for t in topics) == sorted(TOPICS)
    # Each broker's registered load report counts its topics (reported every second).
    for broker in brokers:
        eventually(
            f"{broker.broker_id} reports its topics",
            functools.partial(reports_topics, broker, len(owned[broker.broker_id])),
            TIMEOUT,
        )
    samples = [scrape(b.http_url) for b in brokers]
    assert all(m["magnetar_cluster_owned_bundles"] >= 1 for m in samples), samples
    assert all(m["magnetar_cluster_session_valid"] == 1 for m in samples), samples
    # The first broker sent the client on to the owners of the other topics.
    assert samples[0]["magnetar_cluster_lookup_redirects_total"] >= 1, samples
    # Topic admin requests to any broker are sent on to the owner (307).
    for topic in TOPICS[:3]:
        path = f"/admin/v2/{topic.replace('://', '/')}/internalStats"
        for broker in brokers:
            status, body = http_call("GET", broker.http_url + path)
            assert status == 200 and body["numberOfEntries"] == 5, (broker.broker_id, body)
    # A client that knows only the last broker reads everything back.
    with official_client(brokers[2].url) as client:
        for i, topic in enumerate(TOPICS):
            consumer = client.subscribe(topic, "reader", initial_position=_earliest())
            got = [consumer.receive(10_000).data().decode() for _ in range(5)]
            assert got == [f"{i}-{n}" for n in range(5)]
            consumer.close()


def reports_topics(broker: ClusterBroker, count: int) -> bool:
    """Whether the broker's registered load report counts `count` topics."""
    status, body = http_call("GET", f"{broker.http_url}/admin/v2/broker-stats/load-report")
    assert status == 200, body
    return int(body["topics"]) == count


def scrape(http_url: str) -> dict[str, float]:
    """The cluster metrics a broker exports on /metrics."""
    with urllib.request.urlopen(f"{http_url}/metrics", timeout=10) as response:
        text = response.read().decode()
    found: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("magnetar_cluster_"):
            name, _, value = line.rpartition(" ")
            found[name] = float(value)
    return found


def _earliest() -> object:
    import pulsar

    return pulsar.InitialPosition.Earliest


def test_a_policy_set_through_one_broker_applies_where_the_topic_is_loaded(
    cluster_broker: BrokerMaker,
) -> None:
    """Namespace deduplication switched on through a broker that does not
    serve the topic takes effect on the broker that does (SEM-7.1, 7.2: a
    repeated sequence id is not stored again)."""
    brokers = [cluster_broker() for _ in range(2)]
    with official_client(brokers[0].url) as client:
        for i in range(40):
            topic = f"persistent://public/default/policy-{i}"
            producer = client.create_producer(topic, producer_name=f"p{i}", batching_enabled=False)
            if topic in brokers[1].ownership()["topics"]:
                break
            producer.close()
        else:
            raise AssertionError("the second broker owns none of 40 topics")
        url = f"{brokers[0].http_url}/admin/v2/namespaces/public/default/deduplication"
        status, body = http_call("POST", url, True)
        assert status == 204, body
        stats_url = f"{brokers[1].http_url}/admin/v2/{topic.replace('://', '/')}/internalStats"
        sequence = iter(range(1_000_000))

        def repeat_is_dropped() -> bool:
            before = int(http_call("GET", stats_url)[1]["numberOfEntries"])
            n = next(sequence)
            producer.send(b"x", sequence_id=n)
            producer.send(b"x", sequence_id=n)
            return int(http_call("GET", stats_url)[1]["numberOfEntries"]) == before + 1

        eventually("deduplication applied on the owner", repeat_is_dropped, TIMEOUT)
        producer.close()


def test_namespace_unload_reaches_every_owner(cluster_broker: BrokerMaker) -> None:
    """A namespace unload asked of one broker unloads every bundle of the
    namespace, on whichever broker owns it; clients then find the topics
    again through LOOKUP."""
    brokers = [cluster_broker() for _ in range(3)]
    topics = [f"persistent://public/default/unload-{i}" for i in range(12)]
    with official_client(brokers[0].url) as client:
        for topic in topics:
            client.subscribe(topic, "keep").close()  # the message is kept for it
            producer = client.create_producer(topic)
            producer.send(b"before")
            producer.close()
    owned = {b.broker_id: b.ownership()["topics"] for b in brokers}
    assert sum(1 for found in owned.values() if found) >= 2, owned  # spread over owners
    released = sum(
        scrape(b.http_url).get("magnetar_cluster_bundles_released_total", 0) for b in brokers
    )
    status, body = http_call(
        "PUT", f"{brokers[0].http_url}/admin/v2/namespaces/public/default/unload"
    )
    assert status == 204, body
    assert all(not b.ownership()["topics"] for b in brokers), [b.ownership() for b in brokers]
    after = sum(
        scrape(b.http_url).get("magnetar_cluster_bundles_released_total", 0) for b in brokers
    )
    assert after - released >= sum(1 for found in owned.values() if found)
    with official_client(brokers[1].url) as client:
        for topic in topics:
            consumer = client.subscribe(topic, "keep")
            assert consumer.receive(10_000).data() == b"before"
            consumer.close()
    status, _ = http_call("PUT", f"{brokers[2].http_url}/admin/v2/namespaces/public/nope/unload")
    assert status == 404


def test_partitioned_stats_sum_every_partition_across_brokers(cluster_broker: BrokerMaker) -> None:
    """partitioned-stats asked of any broker counts every partition, also
    those another broker serves: messages in, the subscription's backlog,
    one entry per partition (Pulsar's PartitionedTopicStats)."""
    brokers = [cluster_broker() for _ in range(3)]
    topic = "persistent://public/default/spread-partitioned"
    path = f"/admin/v2/{topic.replace('://', '/')}"
    status, body = http_call("PUT", f"{brokers[0].http_url}{path}/partitions", 12)
    assert status == 204, body
    with official_client(brokers[0].url) as client:
        client.subscribe(topic, "counted").close()
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(12):
            producer.send(b"m", partition_key=f"key-{i}")
        for _ in range(24):  # round robin without a key: every partition gets some
            producer.send(b"m")
        producer.close()
    partitions = [f"{topic}-partition-{i}" for i in range(12)]
    owners = {b.broker_id: set(b.ownership()["topics"]) & set(partitions) for b in brokers}
    assert sum(1 for found in owners.values() if found) >= 2, owners  # spread over owners
    for broker in brokers:
        status, stats = http_call("GET", f"{broker.http_url}{path}/partitioned-stats")
        assert status == 200, (broker.broker_id, stats)
        assert stats["metadata"] == {"partitions": 12}
        assert sorted(stats["partitions"]) == sorted(partitions)
        assert stats["msgInCounter"] == 36, (broker.broker_id, stats)
        assert stats["subscriptions"]["counted"]["msgBacklog"] == 36, (broker.broker_id, stats)
