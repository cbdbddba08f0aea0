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
from tests.support.brokers import BrokerThread
from tests.support.official import assert_serves, official_client
from tests.support.raw_client import RawClient

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
    assert_serves(broker.url, _topic())


def test_topic_name_too_long_for_a_file_name(
    broker: BrokerThread, broker_log: list[MutableMapping[str, Any]]
) -> None:
    """Issue 19.1: a 300-character local name is refused up front with
    InvalidTopicName; nothing reaches storage."""
    with RawClient.for_broker(broker) as client:
        client.connect()
        client.send(
            pb.CommandProducer(
                topic="persistent://public/default/" + "y" * 300, producer_id=1, request_id=1
            )
        )
        error = client.expect(T.ERROR).command.error
        assert error.error == pb.ServerError.InvalidTopicName
        assert "at most 255" in error.message
        client.send(pb.CommandLookupTopic(topic="public/default/" + "z" * 300, request_id=2))
        lookup = client.expect(T.LOOKUP_RESPONSE).command.lookupTopicResponse
        assert lookup.error == pb.ServerError.InvalidTopicName
        # The connection keeps serving.
        assert client.create_producer(_topic(), producer_id=2).producer_name
    _assert_no_traceback(broker_log)
    assert_serves(broker.url, _topic())


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("subscription", "", "Empty subscription name"),
        ("subscription", "   ", "Empty subscription name"),
        ("subscription", "s" * 2000, "at most 1024"),
        ("subscription", "bad\x00name", "control characters"),
        ("consumer_name", "c" * 2000, "at most 1024"),
    ],
    ids=["empty", "blank", "long", "control", "long-consumer"],
)
def test_bad_subscription_and_consumer_names(
    broker: BrokerThread,
    broker_log: list[MutableMapping[str, Any]],
    field: str,
    value: str,
    words: str,
) -> None:
    """Issue 19.2: refused with ProducerBusy (Pulsar's answer to a naming
    error, which its clients report as InvalidConfiguration on subscribe)
    before anything touches storage."""
    with RawClient.for_broker(broker) as client:
        client.connect()
        values = {"subscription": "s", "consumer_name": "c", field: value}
        client.send(
            pb.CommandSubscribe(
                topic=_topic(),
                subType=pb.CommandSubscribe.Shared,
                consumer_id=1,
                request_id=1,
                **values,  # type: ignore[arg-type]
            )
        )
        error = client.expect(T.ERROR).command.error
        assert error.error == pb.ServerError.ProducerBusy
        assert words in error.message
    _assert_no_traceback(broker_log)
    assert_serves(broker.url, _topic())


def test_producer_name_too_long(
    broker: BrokerThread, broker_log: list[MutableMapping[str, Any]]
) -> None:
    with RawClient.for_broker(broker) as client:
        client.connect()
        client.send(
            pb.CommandProducer(
                topic=_topic(), producer_id=1, request_id=1, producer_name="p" * 5000
            )
        )
        error = client.expect(T.ERROR).command.error
        assert error.error == pb.ServerError.ProducerBusy
    _assert_no_traceback(broker_log)


def _batch_send(sequence_id: int, count: int, body: bytes, send_count: int) -> tuple[Any, Payload]:
    metadata = pb.MessageMetadata(
        producer_name="liar", sequence_id=sequence_id, publish_time=1, num_messages_in_batch=count
    )
    return pb.CommandSend(
        producer_id=1, sequence_id=sequence_id, num_messages=send_count
    ), Payload.build(metadata, body)


@pytest.mark.parametrize("claimed", [5, 1_000_000])
def test_a_batch_that_lies_about_its_count_is_refused(
    broker: BrokerThread, broker_log: list[MutableMapping[str, Any]], claimed: int
) -> None:
    """Issue 28.2: a batch whose metadata parses but whose num_messages_in_batch
    the payload does not hold (random bytes, 0 to 100 of them) is answered
    SEND_ERROR and never stored; an official Failover consumer then reads the
    good messages around it (it crashed in receive() when such an entry was
    delivered) and the broker serves everyone."""
    topic = _topic()
    with official_client(broker.url) as official:
        consumer = official.subscribe(
            topic, "fo", consumer_type=pulsar.ConsumerType.Failover, consumer_name="c"
        )
        with RawClient.for_broker(broker) as client:
            client.connect()
            client.create_producer(topic, producer_id=1)
            assert client.publish(1, 0, b"before").message_id.entryId == 0
            for seq, size in enumerate((0, 7, 50, 100), start=1):
                body = bytes((seq * 37 + i * 11) % 256 for i in range(size))
                client.send_payload(*_batch_send(seq, claimed, body, min(claimed, 5)))
                error = client.expect(T.SEND_ERROR).command.send_error
                assert (error.sequence_id, error.error) == (seq, pb.ServerError.ChecksumError)
                assert "batch" in error.message
            assert client.publish(1, 9, b"after").message_id.entryId == 1
        got = [consumer.receive(timeout_millis=5000).data() for _ in range(2)]
        assert got == [b"before", b"after"]
        with pytest.raises(pulsar.Timeout):
            consumer.receive(timeout_millis=300)
    refusals = [e for e in broker_log if "batch does not hold" in str(e.get("event"))]
    assert len(refusals) == 4
    _assert_no_traceback(broker_log)
    assert_serves(broker.url, _topic())


def test_send_count_beyond_the_batch_is_refused(broker: BrokerThread) -> None:
    """Issue 28.2: the SEND's num_messages is bounded by the metadata's count."""
    from magnetar.proto.messages import build_batch

    topic = _topic()
    body = build_batch([(pb.SingleMessageMetadata(payload_size=1), b"x")] * 2)
    with RawClient.for_broker(broker) as client:
        client.connect()
        client.create_producer(topic, producer_id=1)
        client.send_payload(*_batch_send(1, 2, body, 3))
        error = client.expect(T.SEND_ERROR).command.send_error
        assert "SEND says 3 messages for a batch of 2" in error.message
        client.send_payload(*_batch_send(2, 2, body, 2))
        assert client.expect(T.SEND_RECEIPT).command.send_receipt.sequence_id == 2
