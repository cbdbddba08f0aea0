"""Three clusters in a full mesh (issue 45.2): each message reaches every
other cluster once, straight from where it was produced; nothing is
forwarded on or sent back."""

from __future__ import annotations

import contextlib

import pulsar
import pytest

from tests.support.brokers import BrokerFactory
from tests.support.georep import link
from tests.support.official import official_client


def test_full_mesh_of_three_clusters(broker_factory: BrokerFactory) -> None:
    """Issue 45.2: producers on a, b and c; every cluster ends with each of
    the 30 messages exactly once."""
    clusters = {name: broker_factory(cluster_name=name) for name in "abc"}
    link(clusters)
    topic = "persistent://public/geo/mesh"
    expected = sorted(f"{name}-{i}" for name in "abc" for i in range(10))
    with contextlib.ExitStack() as stack:
        opened = {
            name: stack.enter_context(official_client(broker.url))
            for name, broker in clusters.items()
        }
        consumers = {
            name: client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
            for name, client in opened.items()
        }
        for name, client in opened.items():
            producer = client.create_producer(topic, batching_enabled=False)
            for i in range(10):
                producer.send(f"{name}-{i}".encode())
        for name, consumer in consumers.items():
            got = []
            for _ in range(30):
                msg = consumer.receive(timeout_millis=15000)
                consumer.acknowledge(msg)
                got.append(msg.data().decode())
            assert sorted(got) == expected, name
            with pytest.raises(pulsar.Timeout):
                consumer.receive(timeout_millis=500)
