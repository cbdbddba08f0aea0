"""Delayed delivery through the official client (SEMANTICS 8.1, issue 11):
Shared subscriptions hold a message until its time, also across a broker
restart; Exclusive and Failover deliver at once."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta

import pulsar
import pytest

from tests.support.brokers import BrokerThread
from tests.support.official import official_client

Shared = pulsar.ConsumerType.Shared


def _topic() -> str:
    return f"persistent://public/default/delayed-{uuid.uuid4().hex[:8]}"


def test_deliver_after_on_shared_and_at_once_elsewhere(broker: BrokerThread) -> None:
    topic = _topic()
    with official_client(broker.url) as client:
        shared = client.subscribe(topic, "shared", consumer_type=Shared)
        exclusive = client.subscribe(topic, "exclusive")
        failover = client.subscribe(topic, "failover", consumer_type=pulsar.ConsumerType.Failover)
        producer = client.create_producer(topic, batching_enabled=False)
        sent_at = time.monotonic()
        producer.send(b"later", deliver_after=timedelta(milliseconds=2500))
        producer.send(b"now")
        # Other types deliver at once, in order.
        for consumer in (exclusive, failover):
            got = [consumer.receive(timeout_millis=2000).data() for _ in range(2)]
            assert got == [b"later", b"now"]
        # Shared: the undelayed one passes the held one.
        assert shared.receive(timeout_millis=2000).data() == b"now"
        with pytest.raises(pulsar.Timeout):
            shared.receive(timeout_millis=1000)
        msg = shared.receive(timeout_millis=5000)
        assert msg.data() == b"later"
        assert time.monotonic() - sent_at >= 2.4


def test_deliver_at_survives_restart(broker: BrokerThread) -> None:
    """Rebuilt from the backlog after the mark-delete position on restart."""
    topic = _topic()
    with official_client(broker.url) as client:
        client.subscribe(topic, "shared", consumer_type=Shared).close()
        producer = client.create_producer(topic, batching_enabled=False)
        due = int(time.time() * 1000) + 2500
        producer.send(b"at", deliver_at=due)
    broker.restart()
    with official_client(broker.url) as client:
        consumer = client.subscribe(topic, "shared", consumer_type=Shared)
        if time.time() * 1000 < due - 800:
            with pytest.raises(pulsar.Timeout):
                consumer.receive(timeout_millis=500)
        msg = consumer.receive(timeout_millis=5000)
        assert msg.data() == b"at"
        assert time.time() * 1000 >= due - 5  # wall clocks: a few ms of rounding


def test_key_shared_join_is_not_held_by_a_delayed_message(broker: BrokerThread) -> None:
    """SEM-4.4.4, SEM-8.1 (issue 28.3): a delayed message not delivered yet is
    not in flight, so a Key_Shared consumer that joins after it is not held
    back until it is delivered and acked; the other keys flow at once."""
    topic = _topic()
    key_shared = pulsar.ConsumerType.KeyShared
    with official_client(broker.url) as client:
        first = client.subscribe(topic, "ks", consumer_type=key_shared, consumer_name="first")
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(b"delayed", partition_key="k-delayed", deliver_after=timedelta(hours=1))
        for i in range(20):
            producer.send(b"early-%d" % i, partition_key=f"k{i}")
        for _ in range(20):
            first.acknowledge(first.receive(timeout_millis=5000))
        joiner = client.subscribe(topic, "ks", consumer_type=key_shared, consumer_name="joiner")
        for i in range(40):
            producer.send(b"late-%d" % i, partition_key=f"k{i}")
        got: dict[str, list[bytes]] = {"first": [], "joiner": []}
        deadline = time.monotonic() + 10
        while len(got["first"]) + len(got["joiner"]) < 40 and time.monotonic() < deadline:
            for name, consumer in (("first", first), ("joiner", joiner)):
                try:
                    msg = consumer.receive(timeout_millis=100)
                except pulsar.Timeout:
                    continue
                got[name].append(msg.data())
                consumer.acknowledge(msg)
        assert len(got["first"]) + len(got["joiner"]) == 40, got
        assert got["joiner"], "the joiner got none of its keys"
        assert b"delayed" not in got["first"] + got["joiner"]
