"""Topic termination (issue 16): admin terminate stops publishing for good
(TopicTerminated), consumers still read what was stored, and
REACHED_END_OF_TOPIC goes only to clients that handle it (WIRE 4)."""

from __future__ import annotations

import uuid

import pulsar
import pytest

from magnetar.broker.connection.cnx import supports_reached_end_of_topic
from magnetar.proto import pulsar_api_pb2 as pb
from tests.support.brokers import BrokerThread
from tests.support.http_calls import http_call
from tests.support.official import official_client
from tests.support.raw_client import RawClient

T = pb.BaseCommand


def _topic() -> tuple[str, str]:
    local = f"term-{uuid.uuid4().hex[:8]}"
    return f"persistent://public/default/{local}", local


def test_terminate_stops_publishing_and_consumers_drain(broker: BrokerThread) -> None:
    """After terminate a connected producer's send and a new producer fail
    with TopicTerminated; a consumer (official client: no end-of-topic
    notice, it would drop the connection) still gets every stored message;
    the state survives a restart."""
    topic, local = _topic()
    url = f"{broker.http_url}/admin/v2/persistent/public/default/{local}/terminate"
    with official_client(broker.url) as client:
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic, batching_enabled=False)
        ids = [producer.send(b"m%d" % i) for i in range(3)]
        status, body = http_call("POST", url)
        assert status == 200
        assert (body["ledgerId"], body["entryId"]) == (ids[-1].ledger_id(), ids[-1].entry_id())
        assert http_call("POST", url) == (200, body)  # idempotent
        with pytest.raises(pulsar.TopicTerminated):
            producer.send(b"late")
        with pytest.raises(pulsar.TopicTerminated):
            client.create_producer(topic)
        got = [consumer.receive(timeout_millis=10000).data() for _ in range(3)]
        assert got == [b"m0", b"m1", b"m2"]
    broker.restart()
    with official_client(broker.url) as client, pytest.raises(pulsar.TopicTerminated):
        client.create_producer(topic)


def test_reached_end_of_topic_only_for_clients_that_handle_it(broker: BrokerThread) -> None:
    """A client that announces itself as the Java client gets
    REACHED_END_OF_TOPIC once it has read everything; the official (C++
    based) client is never sent it."""
    topic, local = _topic()
    with official_client(broker.url) as client:
        client.create_producer(topic).send(b"only")
    with RawClient.for_broker(broker) as raw:
        raw.send(pb.CommandConnect(client_version="Pulsar-Java-v3.3.0", protocol_version=20))
        raw.expect(T.CONNECTED)
        raw.subscribe(topic, "java", 1, pb.CommandSubscribe.Exclusive)
        raw.send(pb.CommandFlow(consumer_id=1, messagePermits=10))
        raw.expect(T.MESSAGE)
        url = f"{broker.http_url}/admin/v2/persistent/public/default/{local}/terminate"
        assert http_call("POST", url)[0] == 200
        end = raw.expect(T.REACHED_END_OF_TOPIC).command.reachedEndOfTopic
        assert end.consumer_id == 1
    with official_client(broker.url) as client:
        consumer = client.subscribe(topic, "cpp", initial_position=pulsar.InitialPosition.Earliest)
        assert consumer.receive(timeout_millis=10000).data() == b"only"
        # Had the broker sent REACHED_END_OF_TOPIC the client would have
        # dropped the connection and this unsubscribe would fail or retry.
        consumer.unsubscribe()


def test_which_clients_are_told() -> None:
    """WIRE 4: the C++ core closes the connection on REACHED_END_OF_TOPIC."""
    assert supports_reached_end_of_topic("Pulsar-Java-v3.3.0", 20)
    assert not supports_reached_end_of_topic("Pulsar-Java-v1.0", 8)
    assert not supports_reached_end_of_topic("Pulsar-CPP-v4.2.0", 20)
    assert not supports_reached_end_of_topic("raw-test", 20)
