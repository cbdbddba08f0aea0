"""Issue 19: careless or hostile input gets a clear error, no traceback in the
broker's log, and other clients keep working."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, MutableMapping
from typing import Any

import pulsar
import pytest
import structlog

from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.frames import Payload
from tests.integration.broker.harness import BrokerThread, RawClient
from tests.support.official import official_client

T = pb.BaseCommand


def _topic() -> str:
    return f"persistent://public/default/bad-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def broker_log() -> Iterator[list[MutableMapping[str, Any]]]:
    """Every structlog entry the in-process broker writes during the test."""
    with structlog.testing.capture_logs() as entries:
        yield entries


def _assert_no_traceback(entries: list[MutableMapping[str, Any]]) -> None:
    bad = [e for e in entries if "exc_info" in e or e.get("log_level") in ("error", "critical")]
    assert bad == []


def _assert_bystander_served(broker: BrokerThread) -> None:
    topic = _topic()
    with official_client(broker.url) as client:
        consumer = client.subscribe(topic, "bystander")
        producer = client.create_producer(topic)
        producer.send(b"still served")
        msg = consumer.receive(timeout_millis=5000)
        assert msg.data() == b"still served"
        consumer.acknowledge(msg)


def _garbage_metadata_payload(body: bytes) -> Payload:
    """Headers and payload whose metadata is not a MessageMetadata but whose
    CRC32C is valid, so only parsing can tell."""
    valid = Payload.build(b"\xff\xfe\x01garbage-metadata", body)
    return Payload.parse(valid.data)


def test_unparseable_metadata_is_refused_in_order(
    broker: BrokerThread, broker_log: list[MutableMapping[str, Any]]
) -> None:
    """Issue 19.3: a SEND whose metadata does not parse is answered SEND_ERROR
    ChecksumError (the official client then fails that message instead of
    resending it), after the receipts of earlier SENDs; nothing is stored and
    a consumer sees only the good messages."""
    topic = _topic()
    with RawClient.for_broker(broker) as client:
        client.connect()
        client.create_producer(topic, producer_id=1)
        assert client.publish(1, 0, b"first").message_id.entryId == 0
        client.send_payload(
            pb.CommandSend(producer_id=1, sequence_id=1), _garbage_metadata_payload(b"poison")
        )
        error = client.expect(T.SEND_ERROR).command.send_error
        assert (error.sequence_id, error.error) == (1, pb.ServerError.ChecksumError)
        assert "invalid message metadata" in error.message
        # Required fields missing: C++ clients cannot parse it either.
        missing = pb.MessageMetadata(producer_name="p", sequence_id=2)
        client.send_payload(
            pb.CommandSend(producer_id=1, sequence_id=2),
            Payload.build(missing.SerializePartialToString(), b"x"),
        )
        error = client.expect(T.SEND_ERROR).command.send_error
        assert (error.sequence_id, error.error) == (2, pb.ServerError.ChecksumError)
        assert "publish_time" in error.message
        # The connection and the producer live on.
        assert client.publish(1, 3, b"second").message_id.entryId == 1
    with official_client(broker.url) as official:
        reader = official.create_reader(topic, pulsar.MessageId.earliest)
        got = [reader.read_next(timeout_millis=5000).data() for _ in range(2)]
        assert got == [b"first", b"second"]
        assert not reader.has_message_available()
    _assert_no_traceback(broker_log)
    _assert_bystander_served(broker)
