"""Frame-level tests against a real broker: hostile input, handshake, keepalive,
exact Shared dispatch order (SEM-4.3), and the lookup answers."""

from __future__ import annotations

import socket
import struct
import time
import uuid

import pytest

from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.frames import Payload, encode_command, encode_payload_command, wrap
from magnetar.proto.messages import build_batch
from tests.support.brokers import BrokerFactory, BrokerThread
from tests.support.official import assert_serves
from tests.support.raw_client import RawClient

T = pb.BaseCommand


def _topic() -> str:
    return f"persistent://public/default/raw-{uuid.uuid4().hex[:10]}"


def _error_then_close(client: RawClient) -> pb.CommandError:
    frames = client.wait_closed()
    errors = [f.command.error for f in frames if f.type == T.ERROR]
    assert errors, f"expected an ERROR before the close, got {frames}"
    return errors[0]


def test_connected_negotiates_version_and_size(broker: BrokerThread) -> None:
    """WIRE 1, 17: CONNECTED first, version min(client, 20) >= 12, max size advertised."""
    with RawClient.for_broker(broker) as client:
        connected = client.connect(protocol_version=21)
        assert connected.protocol_version == 20
        assert connected.max_message_size == 5 * 1024 * 1024
        assert connected.server_version
        client.send(pb.CommandPing())
        client.expect(T.PONG)
    with RawClient.for_broker(broker) as client:
        assert client.connect(protocol_version=15).protocol_version == 15


@pytest.mark.parametrize(
    "garbage",
    [
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",  # a huge size prefix, really
        struct.pack(">II", 12, 8) + b"\xff" * 8,  # a command that does not decode
        struct.pack(">II", 8, 20) + b"\x00" * 8,  # command size larger than the frame
        struct.pack(">I", 2) + b"\x00\x00",  # a frame too small for its command size
    ],
    ids=["http", "undecodable", "inconsistent-sizes", "tiny"],
)
def test_garbage_gets_error_and_close(broker: BrokerThread, garbage: bytes) -> None:
    with RawClient.for_broker(broker) as bystander:
        bystander.connect()
        with RawClient.for_broker(broker) as client:
            client.connect()
            client.send_raw(garbage)
            _error_then_close(client)
        # Another connection is unaffected.
        bystander.send(pb.CommandPing())
        bystander.expect(T.PONG)
    assert_serves(broker.url, _topic())


def test_truncated_frame_then_eof(broker: BrokerThread) -> None:
    """Half a frame and then the end of the stream: the broker just closes."""
    frame = encode_command(wrap(pb.CommandConnect(client_version="x", protocol_version=20)))
    with RawClient.for_broker(broker) as client:
        client.send_raw(frame[: len(frame) // 2])
        client.sock.shutdown(1)  # SHUT_WR
        assert client.wait_closed() == []
    assert_serves(broker.url, _topic())


def test_oversize_size_prefix(broker: BrokerThread) -> None:
    """An announced frame above max message size + headroom: error, close."""
    with RawClient.for_broker(broker) as client:
        client.connect()
        client.send_raw(struct.pack(">II", 64 * 1024 * 1024, 10))
        error = _error_then_close(client)
        assert "exceeds" in error.message
    assert_serves(broker.url, _topic())


def test_command_before_connect(broker: BrokerThread) -> None:
    with RawClient.for_broker(broker) as client:
        client.send(pb.CommandLookupTopic(topic=_topic(), request_id=1))
        error = _error_then_close(client)
        assert "before CONNECT" in error.message
    assert_serves(broker.url, _topic())


def test_send_before_producer(broker: BrokerThread) -> None:
    with RawClient.for_broker(broker) as client:
        client.connect()
        metadata = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
        client.send_payload(
            pb.CommandSend(producer_id=42, sequence_id=0), Payload.build(metadata, b"x")
        )
        error = _error_then_close(client)
        assert "producer 42" in error.message
    assert_serves(broker.url, _topic())


def test_bad_checksum_gets_send_error_and_connection_lives(broker: BrokerThread) -> None:
    """WIRE 5: ChecksumError is answered per SEND; the connection stays open."""
    with RawClient.for_broker(broker) as client:
        client.connect()
        client.create_producer(_topic(), producer_id=1)
        metadata = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
        data = bytearray(Payload.build(metadata, b"payload").data)
        data[-1] ^= 0xFF
        client.send_payload(
            pb.CommandSend(producer_id=1, sequence_id=0), Payload(bytes(data), 10, 0, None)
        )
        error = client.expect(T.SEND_ERROR).command.send_error
        assert error.error == pb.ServerError.ChecksumError
        receipt = client.publish(1, 1, b"good")
        assert (receipt.sequence_id, receipt.message_id.entryId) == (1, 0)


def test_lookup_and_partitioned_metadata(broker: BrokerThread) -> None:
    """WIRE 3: LOOKUP answers Connect with both URLs; unknown topics have 0 partitions."""
    with RawClient.for_broker(broker) as client:
        client.connect()
        client.send(pb.CommandPartitionedTopicMetadata(topic=_topic(), request_id=7))
        meta = client.expect(T.PARTITIONED_METADATA_RESPONSE).command.partitionMetadataResponse
        assert (meta.request_id, meta.partitions, meta.response) == (7, 0, meta.Success)
        client.send(pb.CommandLookupTopic(topic=_topic(), request_id=8))
        lookup = client.expect(T.LOOKUP_RESPONSE).command.lookupTopicResponse
        assert lookup.response == lookup.Connect
        assert lookup.brokerServiceUrl == broker.url
        assert lookup.brokerServiceUrlTls
        assert not lookup.proxy_through_service_url
        client.send(pb.CommandLookupTopic(topic="bad://x", request_id=9))
        failed = client.expect(T.LOOKUP_RESPONSE).command.lookupTopicResponse
        assert (failed.response, failed.error) == (failed.Failed, pb.ServerError.InvalidTopicName)


def test_close_unknown_ids_succeed(broker: BrokerThread) -> None:
    """WIRE 20: CLOSE_* for an unknown id is answered SUCCESS."""
    with RawClient.for_broker(broker) as client:
        client.connect()
        client.send(pb.CommandCloseConsumer(consumer_id=99, request_id=1))
        assert client.expect(T.SUCCESS).command.success.request_id == 1
        client.send(pb.CommandCloseProducer(producer_id=99, request_id=2))
        assert client.expect(T.SUCCESS).command.success.request_id == 2


def test_keepalive_closes_silent_connection(broker_factory: BrokerFactory) -> None:
    """WIRE 16: PING when idle; a peer that stays silent is disconnected."""
    broker = broker_factory(keepalive_interval_seconds=0.2)
    with RawClient.for_broker(broker) as client:
        client.connect()
        started = time.monotonic()
        ping = client.next_frame(timeout=2)
        assert ping.type == T.PING
        # Do not answer: the next tick closes the connection.
        assert client.wait_closed(timeout=3) == []
        assert time.monotonic() - started < 2
    with RawClient.for_broker(broker) as client:
        client.connect()
        for _ in range(3):  # an answering peer stays connected
            client.expect(T.PING, timeout=2)
            client.send(pb.CommandPong())
        client.send(pb.CommandPing())
        client.expect(T.PONG)


def test_shared_dispatch_order_sem_4_3(broker: BrokerThread) -> None:
    """SEM-4.3: C1 (priority 0, 2 permits), C2 (0, 1), C3 (0, 1), C4 (1, 2),
    C5 (1, 1) get the entries in the order C1, C2, C3, C1, C4, C5, C4."""
    topic = _topic()
    setup = [(1, 0, 2), (2, 0, 1), (3, 0, 1), (4, 1, 2), (5, 1, 1)]
    with RawClient.for_broker(broker) as client:
        client.connect()
        for cid, priority, _permits in setup:
            client.subscribe(topic, "shared", cid, priority_level=priority, name=f"C{cid}")
        client.create_producer(topic, producer_id=1)
        for seq in range(7):
            client.publish(1, seq, f"m{seq}".encode())
        # All permits in one write, so the dispatcher sees them together.
        client.send(*(pb.CommandFlow(consumer_id=cid, messagePermits=p) for cid, _prio, p in setup))
        receivers: dict[int, int] = {}
        while len(receivers) < 7:
            message = client.expect(T.MESSAGE).command.message
            receivers[message.message_id.entryId] = message.consumer_id
        order = [f"C{receivers[entry]}" for entry in range(7)]
        assert order == ["C1", "C2", "C3", "C1", "C4", "C5", "C4"]
        # No permits left anywhere: an eighth entry waits for a FLOW.
        client.publish(1, 7, b"m7")
        with pytest.raises(TimeoutError):
            client.expect(T.MESSAGE, timeout=0.3)
        client.send(pb.CommandFlow(consumer_id=5, messagePermits=1))
        assert client.expect(T.MESSAGE).command.message.consumer_id == 5


def test_permits_count_batch_messages(broker: BrokerThread) -> None:
    """SEM-2.2: a batch entry costs its message count and is never split; as in
    Pulsar, one entry may cross the line while permits are positive, then the
    consumer waits until FLOW makes them positive again."""
    topic = _topic()
    with RawClient.for_broker(broker) as client:
        client.connect()
        client.subscribe(topic, "s", 1, pb.CommandSubscribe.Exclusive)
        client.send(pb.CommandFlow(consumer_id=1, messagePermits=10))  # queue of 10
        client.create_producer(topic, producer_id=1)
        for seq in range(7):
            client.send_message(1, seq, b"single")
            client.expect_each(T.SEND_RECEIPT, T.MESSAGE)
        # 3 permits left: the batch of 5 still goes out (one entry may cross the line).
        five = build_batch([(pb.SingleMessageMetadata(payload_size=1), b"b")] * 5)
        client.send_message(1, 7, five, num_messages_in_batch=5)
        batch = client.expect_each(T.SEND_RECEIPT, T.MESSAGE)[T.MESSAGE].payload
        assert batch is not None
        assert batch.metadata.num_messages_in_batch == 5
        # Now at -2: nothing more until permits are positive again.
        client.publish(1, 8, b"single")
        with pytest.raises(TimeoutError):
            client.expect(T.MESSAGE, timeout=0.3)
        client.send(pb.CommandFlow(consumer_id=1, messagePermits=2))
        with pytest.raises(TimeoutError):  # back to 0: still nothing
            client.expect(T.MESSAGE, timeout=0.3)
        client.send(pb.CommandFlow(consumer_id=1, messagePermits=1))
        assert client.expect(T.MESSAGE).command.message.message_id.entryId == 8


def test_receipts_in_order_and_stored_bytes_forwarded(broker: BrokerThread) -> None:
    """WIRE 5, DESIGN hot path: receipts in SEND order; MESSAGE carries the exact bytes."""
    topic = _topic()
    with RawClient.for_broker(broker) as client:
        client.connect()
        client.create_producer(topic, producer_id=3)
        payloads = []
        for seq in range(50):
            metadata = pb.MessageMetadata(
                producer_name="p", sequence_id=seq, publish_time=1000 + seq
            )
            payload = Payload.build(metadata, f"body-{seq}".encode())
            payloads.append(payload.data)
            client.send_payload(pb.CommandSend(producer_id=3, sequence_id=seq), payload)
        receipts = [client.expect(T.SEND_RECEIPT).command.send_receipt for _ in range(50)]
        assert [r.sequence_id for r in receipts] == list(range(50))
        assert [r.message_id.entryId for r in receipts] == list(range(50))
        client.subscribe(topic, "s", 9, pb.CommandSubscribe.Exclusive)
        client.send(pb.CommandFlow(consumer_id=9, messagePermits=100))
        got = [client.expect(T.MESSAGE) for _ in range(50)]
        assert [f.payload.data if f.payload else None for f in got] == payloads


def test_subscription_creation_off(broker: BrokerThread) -> None:
    """With automatic subscription creation off, a new name gets
    SubscriptionNotFound; subscriptions made before (and restored from disk) work."""
    topic = _topic()
    with RawClient.for_broker(broker) as client:
        client.connect()
        client.subscribe(topic, "existing", 1)
    broker.restart(allow_auto_subscription_creation=False)
    with RawClient.for_broker(broker) as client:
        client.connect()
        client.subscribe(topic, "existing", 1)
        client.send(
            pb.CommandSubscribe(
                topic=topic,
                subscription="nope",
                subType=pb.CommandSubscribe.Shared,
                consumer_id=2,
                request_id=5,
            )
        )
        error = client.expect(T.ERROR).command.error
        assert (error.request_id, error.error) == (5, pb.ServerError.SubscriptionNotFound)
        assert "nope" in error.message


def test_graceful_shutdown_tells_clients(broker: BrokerThread) -> None:
    """Shutdown closes producers and consumers with CLOSE_PRODUCER / CLOSE_CONSUMER
    first, so clients reconnect elsewhere, then closes the connection."""
    topic = _topic()
    with RawClient.for_broker(broker) as client:
        client.connect()
        client.create_producer(topic, producer_id=4)
        client.subscribe(topic, "s", 6, pb.CommandSubscribe.Exclusive)
        broker.stop()
        frames = client.wait_closed()
        kinds = {f.type for f in frames}
        assert {T.CLOSE_PRODUCER, T.CLOSE_CONSUMER} <= kinds
        closes = [
            f.command.close_producer.producer_id for f in frames if f.type == T.CLOSE_PRODUCER
        ]
        assert closes == [4]


def test_publish_backpressure_pauses_reading(broker_factory: BrokerFactory) -> None:
    """Too many publishes awaiting receipts stop reading until receipts drain;
    nothing is lost and receipts stay in order."""
    broker = broker_factory(max_pending_publish_per_connection=4)
    topic = _topic()
    count = 200
    with RawClient.for_broker(broker) as client:
        client.connect()
        client.create_producer(topic, producer_id=1)
        frames = []
        for seq in range(count):
            metadata = pb.MessageMetadata(producer_name="p", sequence_id=seq, publish_time=1)
            frames.append(
                encode_payload_command(
                    wrap(pb.CommandSend(producer_id=1, sequence_id=seq)),
                    Payload.build(metadata, b"x" * 100),
                )
            )
        client.send_raw(b"".join(frames))
        receipts = [client.expect(T.SEND_RECEIPT).command.send_receipt for _ in range(count)]
        assert [r.sequence_id for r in receipts] == list(range(count))
    assert broker.server is not None
    registry = broker.server.metrics.registry
    assert (registry.get_sample_value("magnetar_connection_read_pauses_total") or 0) > 0


def test_dispatch_pauses_above_write_high_water_mark(broker_factory: BrokerFactory) -> None:
    """Dispatch to a connection stops while its socket buffer is above the
    high-water mark, even with permits left, and resumes when it drains."""
    broker = broker_factory(connection_write_high_water_mark=64 * 1024)
    topic = _topic()
    count, size = 200, 64 * 1024
    with RawClient.for_broker(broker) as producer:
        producer.connect()
        producer.create_producer(topic, producer_id=1)
        for seq in range(count):
            producer.send_message(1, seq, bytes([seq % 256]) * size)
        for _ in range(count):
            producer.expect(T.SEND_RECEIPT)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
    sock.connect((broker.config.advertised_host, broker.port))
    with RawClient.from_socket(sock) as consumer:
        consumer.connect()
        consumer.subscribe(topic, "slow", 1, pb.CommandSubscribe.Exclusive)
        consumer.send(pb.CommandFlow(consumer_id=1, messagePermits=1000))
        time.sleep(0.3)  # the broker writes until the buffers fill, then stops

        async def permits_left() -> int:
            assert broker.server is not None and broker.server.service is not None
            sub = broker.server.service.topics[topic].subscriptions["slow"]
            return sub.consumers[0].permits

        stalled = broker.call(permits_left())
        assert 1000 - count < stalled < 1000, "dispatch paused with permits left"
        entries = [
            consumer.expect(T.MESSAGE).command.message.message_id.entryId for _ in range(count)
        ]
        assert entries == list(range(count))
        assert broker.call(permits_left()) == 1000 - count
