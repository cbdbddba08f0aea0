"""Geo-replication between two standalone brokers, clusters "a" and "b"
(issue 45.2): what a message keeps, active-active without loops, and the
per-message replication controls."""

from __future__ import annotations

from typing import Any

import pulsar
import pytest

from magnetar.broker.topics.base import is_persistent
from magnetar.proto.frames import Payload
from tests.support.brokers import BrokerThread
from tests.support.http_calls import http_call
from tests.support.official import official_client
from tests.support.polling import eventually


def _receive_all(consumer: Any, count: int, timeout_ms: int = 15000) -> list[Any]:
    got = []
    for _ in range(count):
        msg = consumer.receive(timeout_millis=timeout_ms)
        consumer.acknowledge(msg)
        got.append(msg)
    return got


def _nothing_more(consumer: Any, wait_ms: int = 500) -> None:
    with pytest.raises(pulsar.Timeout):
        consumer.receive(timeout_millis=wait_ms)


def test_message_keeps_its_metadata(linked_pair: tuple[BrokerThread, BrokerThread]) -> None:
    """Issue 45.2: a message produced on A (official client) is consumed on B
    with its key, properties, event time and publish time intact, and
    replicated_from "a" (the broker's replicated flag)."""
    a, b = linked_pair
    topic = "persistent://public/geo/keeps-metadata"
    with official_client(a.url) as client_a, official_client(b.url) as client_b:
        consumer = client_b.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        local = client_a.subscribe(topic, "local")
        producer = client_a.create_producer(topic, batching_enabled=False)
        producer.send(
            b"hello",
            properties={"k": "v", "n": "1"},
            partition_key="key-1",
            event_timestamp=1234567,
        )
        sent = local.receive(timeout_millis=5000)
        msg = consumer.receive(timeout_millis=15000)
        assert msg.data() == b"hello"
        assert msg.properties() == {"k": "v", "n": "1"}
        assert msg.partition_key() == "key-1"
        assert msg.event_timestamp() == 1234567
        assert msg.publish_timestamp() == sent.publish_timestamp()
    assert b.call(_replicated_flags(b, topic)) == ["a"]


async def _replicated_flags(broker: BrokerThread, topic: str) -> list[str]:
    """replicated_from of every entry stored on `topic`."""
    assert broker.server is not None and broker.server.service is not None
    loaded = await broker.server.service.get_topic(topic, create=False)
    assert is_persistent(loaded)
    ledger = loaded.ledger
    entries = await ledger.read_entries(ledger.first_position, 1000)
    return [Payload.parse(e.data).metadata.replicated_from for e in entries]


def test_active_active_without_loops(linked_pair: tuple[BrokerThread, BrokerThread]) -> None:
    """Issue 45.2: producers on both clusters; each side ends with every
    message exactly once (nothing replicated back), in each producer's order."""
    a, b = linked_pair
    topic = "persistent://public/geo/active-active"
    with official_client(a.url) as client_a, official_client(b.url) as client_b:
        sub_a = client_a.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        sub_b = client_b.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        prod_a = client_a.create_producer(topic)
        prod_b = client_b.create_producer(topic)
        for i in range(50):
            prod_a.send_async(f"a-{i}".encode(), None)
            prod_b.send_async(f"b-{i}".encode(), None)
        prod_a.flush()
        prod_b.flush()
        expected = {f"a-{i}" for i in range(50)} | {f"b-{i}" for i in range(50)}
        for consumer in (sub_a, sub_b):
            got = [m.data().decode() for m in _receive_all(consumer, 100)]
            assert sorted(got) == sorted(expected)
            for side in "ab":
                mine = [g for g in got if g.startswith(side)]
                assert mine == [f"{side}-{i}" for i in range(50)]
        _nothing_more(sub_a)  # a loop would bring copies back
        _nothing_more(sub_b)


def test_replicate_to_and_disable_replication(
    linked_pair: tuple[BrokerThread, BrokerThread],
) -> None:
    """Issue 45.2: a message's own replication clusters are honoured:
    `disable_replication` keeps it local, `replication_clusters=["a"]`
    (the local cluster only) too, `["b"]` sends it."""
    a, b = linked_pair
    topic = "persistent://public/geo/replicate-to"
    with official_client(a.url) as client_a, official_client(b.url) as client_b:
        remote = client_b.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        producer = client_a.create_producer(topic, batching_enabled=False)
        producer.send(b"local-only", disable_replication=True)
        producer.send(b"a-only", replication_clusters=["a"])
        producer.send(b"to-b", replication_clusters=["b"])
        producer.send(b"everywhere")
        got = [m.data() for m in _receive_all(remote, 2)]
        assert got == [b"to-b", b"everywhere"]
        _nothing_more(remote)


def test_replication_cursor_is_no_subscription(
    linked_pair: tuple[BrokerThread, BrokerThread],
) -> None:
    """Issue 45.2: the replicator reads the durable cursor pulsar.repl.b,
    which internal stats list and the subscription list leaves out; its
    backlog drains once B has the messages, and the topic stats' replication
    section says so."""
    a, _b = linked_pair
    topic = "persistent://public/geo/cursor"
    with official_client(a.url) as client:
        producer = client.create_producer(topic)
        for i in range(10):
            producer.send(f"m{i}".encode())
    path = f"{a.http_url}/admin/v2/persistent/public/geo/cursor"

    def drained() -> bool:
        status, stats = http_call("GET", path + "/internalStats")
        assert status == 200
        cursor = stats["cursors"].get("pulsar.repl.b")
        return cursor is not None and cursor["markDeletePosition"] == stats["lastConfirmedEntry"]

    eventually("the replication cursor drained", drained)
    replication = http_call("GET", path + "/stats")[1]["replication"]
    assert replication["b"]["replicationBacklog"] == 0
    assert replication["b"]["msgOutCounter"] == 10
    status, subscriptions = http_call("GET", path + "/subscriptions")
    assert (status, subscriptions) == (200, [])


def test_schema_is_registered_on_the_remote(linked_pair: tuple[BrokerThread, BrokerThread]) -> None:
    """Issue 45.2: a message produced with a schema (String) is replicated
    with the schema registered on B first (GET_OR_CREATE_SCHEMA, as Pulsar's
    replicator does); a consumer with that schema reads its value there, and
    the original producer's name is kept."""
    a, b = linked_pair
    topic = "persistent://public/geo/with-schema"
    with official_client(a.url) as client_a, official_client(b.url) as client_b:
        producer = client_a.create_producer(topic, schema=pulsar.schema.StringSchema())
        producer.send("typed")
        url = f"{b.http_url}/admin/v2/schemas/public/geo/with-schema/schema"
        eventually("B has the schema", lambda: http_call("GET", url)[0] == 200)
        schema = http_call("GET", url)[1]
        assert schema["type"] == "STRING"
        consumer = client_b.subscribe(
            topic,
            "s",
            schema=pulsar.schema.StringSchema(),
            initial_position=pulsar.InitialPosition.Earliest,
        )
        msg = consumer.receive(timeout_millis=15000)
        assert msg.value() == "typed"
        assert msg.producer_name() == producer.producer_name()
