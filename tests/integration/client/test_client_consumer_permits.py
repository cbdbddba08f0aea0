"""The basic consumer's flow control (SEM-2) and message decoding, against a scripted broker."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from magnetar.client.aio import Client, Consumer, ConsumerConfiguration, MessageId
from magnetar.client.aio.compression import compress
from magnetar.client.aio.enums import CompressionType, ConsumerCryptoFailureAction
from magnetar.client.aio.errors import Timeout
from magnetar.proto import messages, pulsar_api_pb2 as pb
from magnetar.proto.frames import Frame, Payload, encode_payload_command, wrap
from tests.support.fake_broker import FakeBroker, FakeConnection, Reply
from tests.support.polling import eventually_async

T = pb.BaseCommand
TOPIC = "persistent://public/default/permits"


class ScriptedTopic:
    """Answers SUBSCRIBE, records FLOW and ACK, and pushes MESSAGE frames on demand."""

    def __init__(self, broker: FakeBroker) -> None:
        self.broker = broker
        self.conn: FakeConnection | None = None
        self.consumer_id = -1
        self.entry = 0
        self.subscribed = threading.Event()
        broker._handlers[T.SUBSCRIBE] = self._on_subscribe
        broker._handlers[T.FLOW] = lambda conn, frame: []
        broker._handlers[T.ACK] = lambda conn, frame: []

    def _on_subscribe(self, conn: FakeConnection, frame: Frame) -> list[Reply]:
        self.conn = conn
        self.consumer_id = frame.command.subscribe.consumer_id
        self.subscribed.set()
        return [wrap(pb.CommandSuccess(request_id=frame.command.subscribe.request_id))]

    def push(self, metadata: pb.MessageMetadata, payload: bytes) -> None:
        assert self.conn is not None
        command = wrap(
            pb.CommandMessage(
                consumer_id=self.consumer_id,
                message_id=pb.MessageIdData(ledgerId=3, entryId=self.entry),
            )
        )
        self.entry += 1
        self.conn.send(encode_payload_command(command, Payload.build(metadata, payload)))

    def push_single(self, payload: bytes) -> None:
        self.push(pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1), payload)

    def flows(self) -> list[int]:
        return [f.command.flow.messagePermits for f in self.broker.frames_of(T.FLOW)]

    def acks(self) -> list[list[tuple[int, int]]]:
        return [
            [(m.ledgerId, m.entryId) for m in f.command.ack.message_id]
            for f in self.broker.frames_of(T.ACK)
        ]


@pytest.fixture
def scripted() -> Iterator[ScriptedTopic]:
    with FakeBroker() as broker:
        yield ScriptedTopic(broker)


async def _subscribe(scripted: ScriptedTopic, queue_size: int) -> tuple[Client, Consumer]:
    client = Client(scripted.broker.url, operation_timeout_seconds=3)
    consumer = await client.subscribe(
        TOPIC, "sub", ConsumerConfiguration(receiver_queue_size=queue_size)
    )
    assert isinstance(consumer, Consumer)  # one topic, not partitioned
    return client, consumer


async def test_initial_flow_and_refill_at_half(scripted: ScriptedTopic) -> None:
    """SEM-2.1 / 2.3: receiver_queue_size permits first, then FLOW once half is consumed."""
    client, consumer = await _subscribe(scripted, 10)
    try:
        await eventually_async("FLOW permits [10]", lambda: scripted.flows() == [10], timeout=5)
        for i in range(10):
            scripted.push_single(b"m%d" % i)
        for _ in range(4):
            await consumer.receive(2000)
        await asyncio.sleep(0.05)
        assert scripted.flows() == [10]
        await consumer.receive(2000)
        await eventually_async(
            "FLOW permits [10, 5]", lambda: scripted.flows() == [10, 5], timeout=5
        )
        for _ in range(5):
            await consumer.receive(2000)
        await eventually_async(
            "FLOW permits [10, 5, 5]", lambda: scripted.flows() == [10, 5, 5], timeout=5
        )
        with pytest.raises(Timeout):
            await consumer.receive(50)
    finally:
        await client.close()


async def test_batch_counts_its_messages_and_is_acked_when_all_are(
    scripted: ScriptedTopic,
) -> None:
    """SEM-2.2 / 3.3: a batch entry costs one permit per message; acked once fully acked."""
    client, consumer = await _subscribe(scripted, 4)
    try:
        await eventually_async("FLOW permits [4]", lambda: scripted.flows() == [4], timeout=5)
        singles = [
            (messages.single_metadata(b"x%d" % i, props={"i": str(i)}), b"x%d" % i)
            for i in range(3)
        ]
        raw = messages.build_batch(singles)
        meta = pb.MessageMetadata(
            producer_name="p", sequence_id=0, publish_time=1, num_messages_in_batch=3,
            compression=pb.LZ4, uncompressed_size=len(raw),
        )  # fmt: skip
        scripted.push(meta, compress(CompressionType.LZ4, raw))
        got = [await consumer.receive(2000) for _ in range(3)]
        assert [m.data() for m in got] == [b"x0", b"x1", b"x2"]
        assert [m.properties() for m in got] == [{"i": "0"}, {"i": "1"}, {"i": "2"}]
        assert [m.message_id() for m in got] == [MessageId(3, 0, -1, i, 3) for i in range(3)]
        await eventually_async("FLOW permits [4, 2]", lambda: scripted.flows() == [4, 2], timeout=5)
        await consumer.acknowledge(got[0])
        await consumer.acknowledge(got[2])
        await asyncio.sleep(0.05)
        assert scripted.acks() == []
        await consumer.acknowledge(got[1])
        await eventually_async(
            "the ack of (3, 0)", lambda: scripted.acks() == [[(3, 0)]], timeout=5
        )
    finally:
        await client.close()


async def test_chunks_cost_permits_and_ack_together(scripted: ScriptedTopic) -> None:
    """SEM-8.2: chunks are reassembled; acking the message acks every chunk."""
    client, consumer = await _subscribe(scripted, 2)
    try:
        await eventually_async("FLOW permits [2]", lambda: scripted.flows() == [2], timeout=5)
        body = b"0123456789" * 3
        for chunk_id in range(3):
            scripted.push(
                pb.MessageMetadata(
                    producer_name="p", sequence_id=7, publish_time=1, uuid="p-7",
                    chunk_id=chunk_id, num_chunks_from_msg=3, total_chunk_msg_size=len(body),
                ),
                body[chunk_id * 10 : (chunk_id + 1) * 10],
            )  # fmt: skip
        msg = await consumer.receive(2000)
        assert msg.data() == body
        await consumer.acknowledge(msg)
        await eventually_async(
            "the acks of every chunk",
            lambda: sorted(e for ack in scripted.acks() for e in ack) == [(3, 0), (3, 1), (3, 2)],
            timeout=5,
        )
        # Two non-final chunks and one message handed out: three permits freed.
        assert sum(scripted.flows()) == 2 + 3
    finally:
        await client.close()


async def test_undecodable_message_is_acked_with_a_validation_error(
    scripted: ScriptedTopic,
) -> None:
    client, consumer = await _subscribe(scripted, 10)
    try:
        await eventually_async("FLOW permits [10]", lambda: scripted.flows() == [10], timeout=5)
        scripted.push(
            pb.MessageMetadata(
                producer_name="p", sequence_id=0, publish_time=1,
                compression=pb.ZLIB, uncompressed_size=5,
            ),
            b"definitely not zlib",
        )  # fmt: skip
        scripted.push_single(b"good")
        assert (await consumer.receive(2000)).data() == b"good"
        await eventually_async(
            "the ack of (3, 0)", lambda: scripted.acks() == [[(3, 0)]], timeout=5
        )
        ack = scripted.broker.frames_of(T.ACK)[0].command.ack
        assert ack.validation_error == pb.CommandAck.DecompressionError
    finally:
        await client.close()


@pytest.mark.parametrize(
    "action", [ConsumerCryptoFailureAction.DISCARD, ConsumerCryptoFailureAction.CONSUME]
)
async def test_undecryptable_message_follows_crypto_failure_action(
    scripted: ScriptedTopic, action: ConsumerCryptoFailureAction
) -> None:
    """SEM-1 crypto: an encrypted message we cannot decrypt is acked away (DISCARD) or
    handed out with its payload as it is (CONSUME)."""
    client = Client(scripted.broker.url, operation_timeout_seconds=3)
    conf = ConsumerConfiguration(receiver_queue_size=10, crypto_failure_action=action)
    consumer = await client.subscribe(TOPIC, "sub", conf)
    try:
        await eventually_async("FLOW permits [10]", lambda: scripted.flows() == [10], timeout=5)
        meta = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
        meta.encryption_keys.add(key="k", value=b"secret")
        scripted.push(meta, b"ciphertext")
        scripted.push_single(b"plain")
        if action == ConsumerCryptoFailureAction.DISCARD:
            assert (await consumer.receive(2000)).data() == b"plain"
            await eventually_async(
                "an ack of (3, 0)", lambda: [(3, 0)] in scripted.acks(), timeout=5
            )
        else:
            assert (await consumer.receive(2000)).data() == b"ciphertext"
            assert (await consumer.receive(2000)).data() == b"plain"
    finally:
        await client.close()
