"""Deduplication (SEMANTICS 7, issue 11): the three outcomes of a SEND, the
switch at broker, namespace and topic level, last_sequence_id on reconnect,
chunks, and state that survives a restart."""

from __future__ import annotations

import uuid

from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.ids import to_unsigned64
from magnetar.proto.messages import build_batch
from tests.support.brokers import BrokerFactory, BrokerThread
from tests.support.draining import stored_payloads
from tests.support.http_calls import http_call
from tests.support.official import official_client
from tests.support.raw_client import RawClient

T = pb.BaseCommand
DUP = (to_unsigned64(-1), to_unsigned64(-1))


def _topic(namespace: str = "default") -> str:
    return f"persistent://public/{namespace}/dedup-{uuid.uuid4().hex[:8]}"


def _namespace_with_dedup(broker: BrokerThread) -> str:
    ns = f"dd-{uuid.uuid4().hex[:6]}"
    base = f"{broker.http_url}/admin/v2/namespaces/public/{ns}"
    assert http_call("PUT", base)[0] == 204
    assert http_call("POST", f"{base}/deduplication", True) == (204, None)
    assert http_call("GET", f"{base}/deduplication") == (200, True)
    return ns


def test_duplicate_and_in_order_outcomes(broker: BrokerThread) -> None:
    """SEM-7.2: a new sequence id is stored; one at or below the persisted
    highest gets a receipt for (-1, -1) and is not stored; a batch counts by
    its highest sequence id."""
    topic = _topic(_namespace_with_dedup(broker))
    with RawClient.for_broker(broker) as client:
        client.connect()
        client.send(pb.CommandProducer(topic=topic, producer_id=1, request_id=1, producer_name="p"))
        assert client.expect(T.PRODUCER_SUCCESS).command.producer_success.last_sequence_id == -1
        stored = [client.publish(1, seq, b"m%d" % seq) for seq in range(3)]
        assert [r.message_id.entryId for r in stored] == [0, 1, 2]
        again = client.publish(1, 1, b"m1 again")
        assert (again.sequence_id, (again.message_id.ledgerId, again.message_id.entryId)) == (
            1,
            DUP,
        )
        # A batch of sequence ids 3..5 that declares its highest.
        payload = build_batch(
            (pb.SingleMessageMetadata(payload_size=2, sequence_id=seq), b"b%d" % seq)
            for seq in (3, 4, 5)
        )
        client.send_message(1, 3, payload, num_messages_in_batch=3, highest_sequence_id=5)
        batch = client.expect(T.SEND_RECEIPT).command.send_receipt
        assert batch.message_id.entryId == 3
        client.send_message(1, 4, b"inside the batch")
        inside = client.expect(T.SEND_RECEIPT).command.send_receipt
        assert (inside.message_id.ledgerId, inside.message_id.entryId) == DUP
        assert client.publish(1, 6, b"m6").message_id.entryId == 4
    with RawClient.for_broker(broker) as client:
        client.connect()
        client.send(pb.CommandProducer(topic=topic, producer_id=1, request_id=1, producer_name="p"))
        assert client.expect(T.PRODUCER_SUCCESS).command.producer_success.last_sequence_id == 6
    assert stored_payloads(broker.url, topic) == [b"m0", b"m1", b"m2", b"b3", b"b4", b"b5", b"m6"]


def test_official_producer_continues_from_last_sequence_id(broker: BrokerThread) -> None:
    """A restarted producer with the same name continues from
    last_sequence_id(); a resend of a stored sequence id is not stored."""
    topic = _topic(_namespace_with_dedup(broker))
    with official_client(broker.url) as client:
        producer = client.create_producer(topic, producer_name="app-1", batching_enabled=False)
        for i in range(10):
            producer.send(b"n%d" % i)
        assert producer.last_sequence_id() == 9
        producer.close()
        again = client.create_producer(topic, producer_name="app-1", batching_enabled=False)
        assert again.last_sequence_id() == 9
        again.send(b"resent 5", sequence_id=5)
        again.send(b"n10")
        assert again.last_sequence_id() == 10
    assert stored_payloads(broker.url, topic) == [b"n%d" % i for i in range(11)]


def test_switch_levels_and_connected_producers(broker_factory: BrokerFactory) -> None:
    """Topic policy wins over namespace over broker default; a change applies
    to a producer that is already connected."""
    broker = broker_factory(broker_deduplication_enabled=True)
    ns = f"sw-{uuid.uuid4().hex[:6]}"
    ns_url = f"{broker.http_url}/admin/v2/namespaces/public/{ns}"
    assert http_call("PUT", ns_url)[0] == 204
    topic = _topic(ns)
    topic_url = (
        f"{broker.http_url}/admin/v2/persistent/public/{ns}/{topic.rsplit('/', 1)[1]}"
        "/deduplicationEnabled"
    )
    with RawClient.for_broker(broker) as client:
        client.connect()
        client.send(pb.CommandProducer(topic=topic, producer_id=1, request_id=1, producer_name="p"))
        client.expect(T.PRODUCER_SUCCESS)

        def entry_of(seq: int) -> int:
            entry: int = client.publish(1, seq, b"x").message_id.entryId
            return entry

        assert entry_of(0) == 0
        assert entry_of(0) == DUP[1]  # broker default: on
        assert http_call("POST", f"{ns_url}/deduplication", False)[0] == 204
        assert entry_of(0) == 1  # namespace: off, for the connected producer too
        assert http_call("POST", topic_url, True)[0] == 204
        assert http_call("GET", topic_url) == (200, True)
        assert entry_of(2) == 2
        assert entry_of(2) == DUP[1]  # topic: on, wins over the namespace
        assert http_call("DELETE", topic_url)[0] == 204
        assert entry_of(2) == 3  # back to the namespace's off
        assert http_call("POST", topic_url, "yes")[0] == 400


def test_chunks_share_a_sequence_id_and_are_kept(broker_factory: BrokerFactory) -> None:
    """WIRE 5: all chunks of a chunked message share its sequence id; none is dropped."""
    broker = broker_factory(max_message_size=64 * 1024)
    topic = _topic(_namespace_with_dedup(broker))
    body = bytes(range(256)) * 1024  # 256 KiB: several chunks
    with official_client(broker.url) as client:
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic, batching_enabled=False, chunking_enabled=True)
        producer.send(body)
        producer.send(b"after")
        assert consumer.receive(timeout_millis=10000).data() == body
        assert consumer.receive(timeout_millis=5000).data() == b"after"


def test_state_survives_restart(broker: BrokerThread) -> None:
    """Snapshot + replay: after a restart the broker still knows the highest
    persisted sequence id of every producer."""
    ns = _namespace_with_dedup(broker)
    topic = _topic(ns)
    with official_client(broker.url) as client:
        # A durable subscription keeps the data across the restart (SEM-5.4).
        client.subscribe(topic, "keep").close()
        producer = client.create_producer(topic, producer_name="keeper", batching_enabled=False)
        for i in range(5):
            producer.send(b"k%d" % i)
    broker.restart()
    with official_client(broker.url) as client:
        producer = client.create_producer(topic, producer_name="keeper", batching_enabled=False)
        assert producer.last_sequence_id() == 4
        producer.send(b"again", sequence_id=3)
    assert stored_payloads(broker.url, topic) == [b"k%d" % i for i in range(5)]


def test_generated_producer_names_are_never_reused_after_restart(broker: BrokerThread) -> None:
    """SEMANTICS 7: deduplication keys on the producer name, so a name the
    broker makes up must differ from every name an earlier start made up.
    The shape is Pulsar's, `<cluster>-<start number>-<counter>` (its C++
    client's size checks count on the metadata of a short name)."""
    ns = _namespace_with_dedup(broker)
    topic = _topic(ns)
    with official_client(broker.url) as client:
        client.subscribe(topic, "keep").close()
        first = client.create_producer(topic, batching_enabled=False)
        first.send(b"before")
        before = first.producer_name()
    broker.restart()
    with official_client(broker.url) as client:
        second = client.create_producer(topic, batching_enabled=False)
        after = second.producer_name()
        # The new name is not the old one, so sequence id 0 is not a duplicate.
        second.send(b"after")
    cluster, start, _ = before.rsplit("-", 2)
    assert cluster == "standalone" and start.isdigit()
    assert after.rsplit("-", 2)[:2] == [cluster, str(int(start) + 1)]
    assert stored_payloads(broker.url, topic) == [b"before", b"after"]
