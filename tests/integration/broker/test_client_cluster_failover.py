"""Our client switching clusters (issue 26, item 4): AutoClusterFailover
probing two of our brokers on loopback, and a user-written
ServiceInfoProvider pushing an update. Producers made before a switch go on
sending to the cluster in use."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable

import pytest

import magnetar.client as pulsar
from tests.support.brokers import BrokerFactory, BrokerThread
from tests.support.draining import stored_payloads
from tests.support.polling import eventually


def _topic() -> str:
    return f"persistent://public/default/failover-{time.monotonic_ns()}"


def _keep(topic: str, *brokers: BrokerThread) -> None:
    """A durable subscription on each broker keeps what the topic receives
    (without one, data nobody subscribed to is trimmed)."""
    for broker in brokers:
        with pulsar.Client(broker.url) as client:
            client.subscribe(topic, "keep").close()


def _publishers(broker: BrokerThread, topic: str) -> int:
    path = topic.replace("persistent://", "persistent/")
    with urllib.request.urlopen(f"{broker.http_url}/admin/v2/{path}/stats") as answer:
        return len(json.load(answer)["publishers"])


def _stored(broker: BrokerThread, topic: str) -> list[bytes]:
    """Every message the broker holds on ``topic``, read from the earliest
    (with pulsar.Client's own timeouts, as these tests' clients have)."""
    return stored_payloads(
        broker.url, topic, operation_timeout_seconds=30, connection_timeout_ms=10000
    )


def test_auto_cluster_failover_moves_to_the_secondary_and_back(
    broker_factory: BrokerFactory,
) -> None:
    """The primary stops: after failed probes the client uses the secondary
    and a producer made on the primary sends there; the primary comes back:
    the client returns to it and the producer's next message lands on it."""
    primary, secondary = broker_factory(), broker_factory()
    topic = _topic()
    _keep(topic, primary, secondary)
    config = pulsar.AutoClusterFailover(
        pulsar.ServiceInfo(primary.url),
        [pulsar.ServiceInfo(secondary.url)],
        check_interval_ms=100,
        failover_threshold=2,
        switch_back_threshold=2,
    )
    with pulsar.Client(config, operation_timeout_seconds=20) as client:
        using: Callable[[str], Callable[[], bool]] = lambda url: (  # noqa: E731
            lambda: client.get_service_info().service_url == url
        )
        assert using(primary.url)()
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(b"on-primary-1")

        primary_port = primary.port
        primary.stop()
        eventually("failover to the secondary", using(secondary.url))
        producer.send(b"on-secondary")

        primary.config = primary.config.replace(port=primary_port)
        primary.server = None
        primary.start()
        eventually("switch back to the primary", using(primary.url))
        producer.send(b"on-primary-2")
        producer.close()

    assert _stored(secondary, topic) == [b"on-secondary"]
    assert _stored(primary, topic) == [b"on-primary-1", b"on-primary-2"]


class _StaticProvider(pulsar.ServiceInfoProvider):
    def __init__(self, initial: pulsar.ServiceInfo) -> None:
        self.initial = initial
        self.update: Callable[[pulsar.ServiceInfo], None] | None = None
        self.closed = False

    def initial_service_info(self) -> pulsar.ServiceInfo:
        return self.initial

    def initialize(self, on_service_info_update: Callable[[pulsar.ServiceInfo], None]) -> None:
        self.update = on_service_info_update

    def close(self) -> None:
        self.closed = True


def test_a_provider_update_moves_connected_producers(broker_factory: BrokerFactory) -> None:
    """An update pushed by the provider is the client's service info at once;
    a producer connected to the first cluster reconnects to the second while
    both stay up; closing the client closes the provider."""
    first, second = broker_factory(), broker_factory()
    topic = _topic()
    _keep(topic, first, second)
    provider = _StaticProvider(pulsar.ServiceInfo(first.url))
    with pulsar.Client(provider) as client:
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(b"one")
        assert provider.update is not None
        provider.update(pulsar.ServiceInfo(second.url))
        assert client.get_service_info().service_url == second.url
        # The switch is applied on the client's loop: the producer moves.
        eventually("the producer reconnected to the second", lambda: _publishers(second, topic) > 0)
        producer.send(b"two")
        producer.close()
    assert provider.closed
    assert _stored(first, topic) == [b"one"]
    assert _stored(second, topic) == [b"two"]


def test_cluster_arguments_are_checked() -> None:
    """Wrong types and bounds are ValueError, as in the `pulsar` module;
    authentication and trust stores belong to each ServiceInfo."""
    primary = pulsar.ServiceInfo("pulsar://127.0.0.1:6650")
    secondary = [pulsar.ServiceInfo("pulsar://127.0.0.1:6660")]
    bad: list[Callable[[], object]] = [
        lambda: pulsar.ServiceInfo(None),  # type: ignore[arg-type]
        lambda: pulsar.ServiceInfo("pulsar://h:1", authentication="x"),  # type: ignore[arg-type]
        lambda: pulsar.AutoClusterFailover("x", secondary),  # type: ignore[arg-type]
        lambda: pulsar.AutoClusterFailover(primary, []),
        lambda: pulsar.AutoClusterFailover(primary, ["x"]),  # type: ignore[list-item]
        lambda: pulsar.AutoClusterFailover(primary, secondary, check_interval_ms=0),
        lambda: pulsar.Client(
            pulsar.AutoClusterFailover(primary, secondary),
            authentication=pulsar.AuthenticationToken("t"),
        ),
        lambda: pulsar.Client(_StaticProvider("x")),  # type: ignore[arg-type]
    ]
    for make in bad:
        with pytest.raises(ValueError):
            make()
