"""SEM-4.2 on partitioned topics, seen from the official client's consumers:
partition i's active consumer is index (i mod n) of the consumers sorted by
name, and partitions move when consumers leave."""

from __future__ import annotations

import uuid

import pulsar

from tests.support.brokers import BrokerFactory, BrokerThread
from tests.support.failover_ring import ring_owner
from tests.support.http_calls import http_call
from tests.support.official import official_client


def _partitioned(broker: BrokerThread, partitions: int) -> str:
    local = f"fo-{uuid.uuid4().hex[:8]}"
    url = f"{broker.http_url}/admin/v2/persistent/public/default/{local}/partitions"
    assert http_call("PUT", url, partitions)[0] == 204
    return f"persistent://public/default/{local}"


def _owners(consumers: dict[str, pulsar.Consumer], total: int) -> dict[int, set[str]]:
    """Which consumer received each partition's messages."""
    owners: dict[int, set[str]] = {}
    received = 0
    while received < total:
        progressed = False
        for name, consumer in consumers.items():
            try:
                msg = consumer.receive(timeout_millis=200)
            except pulsar.Timeout:
                continue
            partition = int(msg.topic_name().rsplit("-partition-", 1)[1])
            owners.setdefault(partition, set()).add(name)
            consumer.acknowledge(msg)
            received += 1
            progressed = True
        assert progressed, f"stalled after {received} of {total} messages"
    return owners


def _send_round_robin(client: pulsar.Client, topic: str, count: int) -> None:
    producer = client.create_producer(
        topic,
        batching_enabled=False,
        message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
    )
    for i in range(count):
        producer.send(b"m%d" % i)
    producer.close()


def _subscribe(client: pulsar.Client, topic: str, name: str) -> pulsar.Consumer:
    return client.subscribe(
        topic, "fo", consumer_type=pulsar.ConsumerType.Failover, consumer_name=name
    )


def test_nine_partitions_three_consumers(broker: BrokerThread) -> None:
    """SEM-4.2: A gets P0 P3 P6, B gets P1 P4 P7, C gets P2 P5 P8."""
    topic = _partitioned(broker, 9)
    with official_client(broker.url) as client:
        # Joined out of name order: the assignment sorts by name.
        consumers = {name: _subscribe(client, topic, name) for name in ("C", "A", "B")}
        _send_round_robin(client, topic, 45)
        owners = _owners(consumers, 45)
        expected = {p: {"ABC"[p % 3]} for p in range(9)}
        assert owners == expected


def test_two_partitions_four_consumers_and_takeover(broker: BrokerThread) -> None:
    """SEM-4.2: P0: A, P1: B; when A and B leave, P0: C, P1: D."""
    topic = _partitioned(broker, 2)
    with official_client(broker.url) as client:
        consumers = {name: _subscribe(client, topic, name) for name in ("A", "B", "C", "D")}
        _send_round_robin(client, topic, 10)
        assert _owners(consumers, 10) == {0: {"A"}, 1: {"B"}}
        for name in ("A", "B"):
            consumers.pop(name).close()
        _send_round_robin(client, topic, 10)
        assert _owners(consumers, 10) == {0: {"C"}, 1: {"D"}}


def test_consistent_hashing_option_assigns_partitions_on_the_ring(
    broker_factory: BrokerFactory,
) -> None:
    """SEM-4.2: with active_consumer_failover_consistent_hashing each partition
    goes to the owner of its own name's point on the consumers' ring."""
    broker = broker_factory(active_consumer_failover_consistent_hashing=True)
    topic = _partitioned(broker, 6)
    names = ("A", "B", "C")
    with official_client(broker.url) as client:
        consumers = {name: _subscribe(client, topic, name) for name in names}
        _send_round_robin(client, topic, 30)
        owners = _owners(consumers, 30)
    expected = {p: {ring_owner(f"{topic}-partition-{p}", list(names))} for p in range(6)}
    assert owners == expected


def test_non_partitioned_topic_goes_to_the_ring_owner(broker: BrokerThread) -> None:
    """SEM-4.2 (amended): on a non-partitioned topic the owner of the topic's
    point on the ring is active, not the first to subscribe."""
    for _ in range(4):
        topic = f"persistent://public/default/fo-np-{uuid.uuid4().hex[:8]}"
        names = ["A", "B", "C"]
        with official_client(broker.url) as client:
            consumers = {name: _subscribe(client, topic, name) for name in names}
            producer = client.create_producer(topic, batching_enabled=False)
            for n in range(5):
                producer.send(b"m%d" % n)
            winner = ring_owner(topic, names)
            got = [consumers[winner].receive(timeout_millis=10_000).data() for _ in range(5)]
            assert got == [b"m%d" % n for n in range(5)]
            for name in names:
                if name != winner:
                    try:
                        consumers[name].receive(timeout_millis=100)
                        raise AssertionError(f"standby {name} received a message")
                    except pulsar.Timeout:
                        pass
