"""Partitioned topics through the official client (issue 9): every routing
mode delivers each message once with the partition in its id; automatic
creation of partitioned topics; named listeners on LOOKUP."""

from __future__ import annotations

import uuid
from typing import Any

import pulsar
import pytest

from magnetar.proto import pulsar_api_pb2 as pb
from tests.support.brokers import BrokerFactory, BrokerThread
from tests.support.draining import receive_count
from tests.support.http_calls import http_call
from tests.support.official import official_client
from tests.support.ports import free_port
from tests.support.raw_client import RawClient

PARTITIONS = 4
COUNT = 40


def _partition_of(topic_name: str) -> int:
    return int(topic_name.rsplit("-partition-", 1)[1])


@pytest.mark.parametrize(
    "options",
    [
        {"message_routing_mode": pulsar.PartitionsRoutingMode.RoundRobinDistribution},
        {"message_routing_mode": pulsar.PartitionsRoutingMode.UseSinglePartition},
        {"message_router": lambda msg, n: int(msg.data().split(b"-")[1]) % n},
        {"message_routing_mode": pulsar.PartitionsRoutingMode.RoundRobinDistribution, "key": True},
    ],
    ids=["round-robin", "single-partition", "custom-router", "key-hash"],
)
def test_every_routing_mode_delivers_once_with_its_partition(
    broker: BrokerThread, options: dict[str, Any]
) -> None:
    """Each message arrives once, from the partition its id names; the custom
    router's choice is the partition it lands in, and one key stays on one
    partition."""
    topic = f"persistent://public/default/route-{uuid.uuid4().hex[:8]}"
    url = f"{broker.http_url}/admin/v2/{topic.replace('://', '/')}/partitions"
    assert http_call("PUT", url, PARTITIONS)[0] == 204
    keyed = options.pop("key", False)
    with official_client(broker.url) as client:
        consumer = client.subscribe(topic, "all", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic, batching_enabled=False, **options)
        for i in range(COUNT):
            producer.send(f"m-{i}".encode(), partition_key=f"k{i % 3}" if keyed else None)
        got = receive_count(consumer, COUNT)
        with pytest.raises(pulsar.Timeout):  # nothing more
            consumer.receive(timeout_millis=200)
    assert sorted(m.data() for m in got) == sorted(f"m-{i}".encode() for i in range(COUNT))
    for msg in got:
        assert msg.message_id().partition() == _partition_of(msg.topic_name())
    used = {m.message_id().partition() for m in got}
    if "message_router" in options:
        for msg in got:
            assert msg.message_id().partition() == int(msg.data().split(b"-")[1]) % PARTITIONS
    elif options["message_routing_mode"] == pulsar.PartitionsRoutingMode.UseSinglePartition:
        assert len(used) == 1
    elif keyed:
        by_key: dict[str, set[int]] = {}
        for msg in got:
            by_key.setdefault(msg.partition_key(), set()).add(msg.message_id().partition())
        assert all(len(parts) == 1 for parts in by_key.values())
    else:
        assert used == set(range(PARTITIONS))


def test_automatic_creation_makes_partitioned_topics(broker_factory: BrokerFactory) -> None:
    """allow_auto_topic_creation_type = partitioned: a new topic gets
    default_num_partitions partitions, visible to the client and the admin API."""
    broker = broker_factory(allow_auto_topic_creation_type="partitioned", default_num_partitions=3)
    topic = f"persistent://public/default/auto-{uuid.uuid4().hex[:8]}"
    with official_client(broker.url) as client:
        client.create_producer(topic).send(b"x")
        assert client.get_topic_partitions(topic) == [f"{topic}-partition-{i}" for i in range(3)]
    url = f"{broker.http_url}/admin/v2/{topic.replace('://', '/')}/partitions"
    assert http_call("GET", url) == (200, {"partitions": 3})


def test_named_listeners_on_lookup(broker_factory: BrokerFactory) -> None:
    """LOOKUP with a listener name answers that listener's URL; an unknown
    name fails the client's lookup (Pulsar answers it with a lookup error)."""
    port = free_port()
    broker = broker_factory(
        port=port,
        advertised_listeners=f"internal:pulsar://127.0.0.1:{port},external:pulsar://localhost:{port}",
    )
    topic = f"persistent://public/default/listen-{uuid.uuid4().hex[:8]}"
    with RawClient.for_broker(broker) as raw:
        raw.connect()
        for name, host in (("internal", "127.0.0.1"), ("external", "localhost")):
            raw.send(
                pb.CommandLookupTopic(
                    topic=topic, request_id=raw.request_id(), advertised_listener_name=name
                )
            )
            answer = raw.expect(pb.BaseCommand.LOOKUP_RESPONSE).command.lookupTopicResponse
            assert answer.brokerServiceUrl == f"pulsar://{host}:{port}"
    for name in ("internal", "external"):
        with official_client(broker.url, listener_name=name) as client:
            client.create_producer(topic).send(name.encode())
    with (
        official_client(broker.url, listener_name="nowhere") as client,
        pytest.raises(pulsar.PulsarException),
    ):
        client.create_producer(topic)


def test_reader_on_a_partitioned_topic(broker: BrokerThread) -> None:
    """A reader of the official client over every partition, from earliest:
    each message once, then nothing more available."""
    topic = f"persistent://public/default/read-parts-{uuid.uuid4().hex[:8]}"
    url = f"{broker.http_url}/admin/v2/{topic.replace('://', '/')}/partitions"
    assert http_call("PUT", url, 3)[0] == 204
    with official_client(broker.url) as client:
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(30):
            producer.send(f"m-{i}".encode())
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        got = []
        while reader.has_message_available():
            msg = reader.read_next(timeout_millis=5000)
            assert msg.message_id().partition() == _partition_of(msg.topic_name())
            got.append(msg.data())
        assert sorted(got) == sorted(f"m-{i}".encode() for i in range(30))
        reader.close()
