"""Our client's listener_name (the official Client keyword): its lookups,
binary and HTTP, ask for the broker's advertised listener of that name and
connect where it points; a name the broker does not have is an error."""

from __future__ import annotations

import uuid

import pytest

import magnetar.client as pulsar
from tests.support.brokers import BrokerFactory
from tests.support.ports import free_ports


@pytest.mark.parametrize("lookup", ["binary", "http"])
def test_listener_name_picks_the_address_lookups_answer(
    broker_factory: BrokerFactory, lookup: str
) -> None:
    port, dead = free_ports(2)  # nothing listens on `dead`
    broker = broker_factory(
        port=port,
        advertised_listeners=f"inside:pulsar://127.0.0.1:{port},gone:pulsar://127.0.0.1:{dead}",
    )
    url = broker.url if lookup == "binary" else broker.http_url
    topic = f"persistent://public/default/listener-{uuid.uuid4().hex[:8]}"
    with pulsar.Client(url, listener_name="inside", operation_timeout_seconds=5) as client:
        assert client.create_producer(topic).send(b"via inside") is not None
    for name in ("gone", "nowhere"):
        with (
            pulsar.Client(url, listener_name=name, operation_timeout_seconds=2) as client,
            pytest.raises(pulsar.PulsarException),
        ):
            client.create_producer(topic)
