"""Admin calls on a partitioned topic's base name (Pulsar's behaviour):
subscription create / list / delete and unload apply to every partition;
per-topic calls (stats, skip, peek, ...) are refused with 409 instead of
loading a stray topic of the base name; unload of a topic with a connected
consumer makes it reconnect and keep receiving."""

from __future__ import annotations

import time
import uuid

import pulsar
import pytest

from tests.support.brokers import BrokerThread
from tests.support.http_calls import http_call
from tests.support.official import official_client


def test_subscription_calls_fan_out_to_partitions(broker: BrokerThread) -> None:
    topic = f"persistent://public/default/ap-{uuid.uuid4().hex[:6]}"
    url = f"{broker.http_url}/admin/v2/{topic.replace('://', '/')}"
    assert http_call("PUT", f"{url}/partitions", 3) == (204, None)
    assert http_call("PUT", f"{url}/subscription/s", {"ledgerId": -1, "entryId": -1}) == (
        204,
        None,
    )
    for i in range(3):
        partition = f"{url}-partition-{i}"
        assert http_call("GET", f"{partition}/subscriptions") == (200, ["s"])
    assert http_call("GET", f"{url}/subscriptions") == (200, ["s"])
    status, body = http_call("PUT", f"{url}/subscription/s")
    assert status == 409 and "already exists" in body["reason"]
    status, body = http_call("GET", f"{url}/stats")
    assert status == 409 and "partitioned-stats" in body["reason"]
    status, _ = http_call("POST", f"{url}/subscription/s/skip/1")
    assert status == 409
    assert http_call("PUT", f"{url}/unload") == (204, None)
    assert http_call("DELETE", f"{url}/subscription/s") == (204, None)
    assert http_call("GET", f"{url}/subscriptions") == (200, [])
    # No stray topic named like the base was ever loaded.
    assert broker.server is not None and broker.server.service is not None
    loaded = set(broker.server.service.topics)
    assert f"{topic}-partition-0" in loaded and topic not in loaded


def test_unload_moves_a_connected_consumer(broker: BrokerThread) -> None:
    topic = f"persistent://public/default/unload-{uuid.uuid4().hex[:6]}"
    url = f"{broker.http_url}/admin/v2/{topic.replace('://', '/')}"
    with official_client(broker.url) as client:
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(b"before")
        first = consumer.receive(5000)
        assert first.data() == b"before"
        consumer.acknowledge(first)
        deadline = time.monotonic() + 10  # the ack is grouped: wait until the broker has it
        while http_call("GET", f"{url}/stats")[1]["subscriptions"]["s"]["msgBacklog"]:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert http_call("PUT", f"{url}/unload") == (204, None)
        # Both reconnect through LOOKUP; the topic loads again.
        producer.send(b"after")
        msg = consumer.receive(10_000)
        assert msg.data() == b"after"
        consumer.acknowledge(msg)
        stats = http_call("GET", f"{url}/stats")[1]
        assert len(stats["subscriptions"]["s"]["consumers"]) == 1


def test_unknown_admin_routes_answer_json(broker: BrokerThread) -> None:
    status, body = http_call("GET", f"{broker.http_url}/admin/v2/no/such/thing/here/at/all")
    assert status == 404 and "Not Found" in body["reason"]
    status, body = http_call("PATCH", f"{broker.http_url}/admin/v2/tenants")
    assert status == 405 and "PATCH" in body["reason"]
    status, body = http_call(
        "GET", f"{broker.http_url}/admin/v2/persistent/public/default/nope/stats"
    )
    assert status == 404 and "creation" not in body["reason"]


def test_a_partition_past_the_count_is_not_created(broker: BrokerThread) -> None:
    """With automatic topic creation on, a partition index at or past the
    partitioned topic's count is TopicNotFound, as in Pulsar (the C++ suite's
    ProducerTest.testFailedToCreateNewPartitionProducer); once the count is
    raised, the partition is created on first use."""
    topic = f"persistent://public/default/past-{uuid.uuid4().hex[:6]}"
    url = f"{broker.http_url}/admin/v2/{topic.replace('://', '/')}"
    assert http_call("PUT", f"{url}/partitions", 2) == (204, None)
    with official_client(broker.url, operation_timeout_seconds=3) as client:
        client.create_producer(f"{topic}-partition-1").send(b"in range")
        with pytest.raises(pulsar.TopicNotFound):
            client.create_producer(f"{topic}-partition-2")
        assert http_call("POST", f"{url}/partitions", 3) == (204, None)
        client.create_producer(f"{topic}-partition-2").send(b"after the update")
