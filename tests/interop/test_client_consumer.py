"""Our consumer and its trackers against each broker (SEM-2, SEM-3, SEM-6)."""

from __future__ import annotations

import asyncio
import time

import pytest

from magnetar.client.aio import (
    Client,
    ConsumerConfiguration,
    ConsumerType,
    InitialPosition,
    Message,
    OutgoingMessage,
    Producer,
    ProducerConfiguration,
    errors,
)
from magnetar.client.aio.consumer.consumer import Consumer
from magnetar.client.aio.consumer.dead_letter import REAL_TOPIC, RECONSUMETIMES
from magnetar.client.aio.policies import BatchReceivePolicy, DeadLetterPolicy
from tests.interop.conftest import BrokerUnderTest

pytestmark = pytest.mark.lite


async def _producer(client: Client, topic: str, batched: bool = False) -> Producer:
    producer = await client.create_producer(topic, ProducerConfiguration(batching_enabled=batched))
    assert isinstance(producer, Producer)
    return producer


async def _sub(client: Client, topic: str, sub: str = "sub", **options: object) -> Consumer:
    options.setdefault("initial_position", InitialPosition.Earliest)
    consumer = await client.subscribe(topic, sub, ConsumerConfiguration.from_keywords(options))
    assert isinstance(consumer, Consumer)
    return consumer


async def _send(producer: Producer, count: int, prefix: str = "m") -> None:
    for i in range(count):
        await producer.send(OutgoingMessage(f"{prefix}{i}".encode()))


async def _drain(consumer: Consumer, timeout_ms: int = 300) -> list[Message]:
    out: list[Message] = []
    while True:
        try:
            out.append(await consumer.receive(timeout_ms))
        except errors.Timeout:
            return out


async def test_grouped_acks_are_flushed_on_close(client: Client, broker: BrokerUnderTest) -> None:
    """SEM-3.4: acks grouped for 10 s still reach the broker when the consumer closes."""
    topic = broker.topic("acks")
    producer = await _producer(client, topic)
    await _send(producer, 6)
    consumer = await _sub(client, topic, ack_group_time_ms=10000)
    for i in range(6):
        msg = await consumer.receive(5000)
        if i % 2 == 0:
            await consumer.acknowledge(msg)
    await consumer.close()
    again = await _sub(client, topic)
    assert sorted(m.data() for m in await _drain(again)) == [b"m1", b"m3", b"m5"]


async def test_ack_receipt_waits_for_the_broker(client: Client, broker: BrokerUnderTest) -> None:
    """SEM-1 ack_receipt_enabled: acknowledge returns once ACK_RESPONSE came back."""
    topic = broker.topic("receipt")
    producer = await _producer(client, topic)
    await _send(producer, 3)
    consumer = await _sub(client, topic, ack_receipt_enabled=True, ack_group_time_ms=0)
    for _ in range(3):
        await asyncio.wait_for(consumer.acknowledge(await consumer.receive(5000)), 5)
    await consumer.close()
    assert await _drain(await _sub(client, topic)) == []


async def test_cumulative_ack_refused_on_shared(client: Client, broker: BrokerUnderTest) -> None:
    """SEM-3.2: cumulative ack on Shared / Key_Shared is refused client-side."""
    topic = broker.topic("cumul")
    producer = await _producer(client, topic)
    await _send(producer, 4)
    shared = await _sub(client, topic, "shared", consumer_type=ConsumerType.Shared)
    msg = await shared.receive(5000)
    with pytest.raises(errors.CumulativeAcknowledgementNotAllowedError):
        await shared.acknowledge_cumulative(msg)
    exclusive = await _sub(client, topic, "excl")
    received = [await exclusive.receive(5000) for _ in range(4)]
    await exclusive.acknowledge_cumulative(received[2])
    await exclusive.close()
    rest = await _drain(await _sub(client, topic, "excl"))
    assert [m.data() for m in rest] == [b"m3"]


async def test_nack_redelivers_once_after_the_delay(
    client: Client, broker: BrokerUnderTest
) -> None:
    """SEM-3.5 / 3.7: a nacked message comes back once, named by id on Shared, count 1."""
    topic = broker.topic("nack")
    producer = await _producer(client, topic)
    await _send(producer, 3)
    consumer = await _sub(
        client,
        topic,
        consumer_type=ConsumerType.Shared,
        negative_ack_redelivery_delay_ms=100,
        unacked_messages_timeout_ms=1000,
    )
    first = [await consumer.receive(5000) for _ in range(3)]
    consumer.negative_acknowledge(first[1])
    await consumer.acknowledge(first[0])
    await consumer.acknowledge(first[2])
    again = await consumer.receive(5000)
    assert again.data() == b"m1" and again.redelivery_count() == 1
    # Neither the nack timer nor the ack timeout sends it a second time.
    await consumer.acknowledge(again)
    assert await _drain(consumer, 2500) == []


async def test_ack_timeout_redelivers(client: Client, broker: BrokerUnderTest) -> None:
    """SEM-3.6: a message not acked within ack_timeout is redelivered."""
    topic = broker.topic("acktimeout")
    producer = await _producer(client, topic)
    await _send(producer, 2)
    consumer = await _sub(
        client, topic, consumer_type=ConsumerType.Shared, unacked_messages_timeout_ms=1000
    )
    first = await consumer.receive(5000)
    second = await consumer.receive(5000)
    await consumer.acknowledge(second)
    again = await consumer.receive(10000)
    assert again.data() == first.data() and again.redelivery_count() >= 1


async def test_exclusive_redeliver_all_clears_the_queue(
    client: Client, broker: BrokerUnderTest
) -> None:
    """SEM-3.7: on Exclusive the client asks for all unacked; they all come again."""
    broker.require("redeliver_all")
    topic = broker.topic("redeliver")
    producer = await _producer(client, topic)
    await _send(producer, 5)
    consumer = await _sub(client, topic)
    got = [await consumer.receive(5000) for _ in range(2)]
    await consumer.acknowledge(got[0])
    consumer.flush_acks()  # the grouped ack goes out before the rewind
    consumer.redeliver_unacknowledged_messages()
    rest = await _drain(consumer, 1000)
    assert sorted({m.data() for m in rest}) == [b"m1", b"m2", b"m3", b"m4"]


async def test_batch_receive_policy(client: Client, broker: BrokerUnderTest) -> None:
    """SEM-1 batch_receive_policy: returns at the count limit, or what came by the timeout."""
    topic = broker.topic("batchrecv")
    producer = await _producer(client, topic, batched=True)
    await _send(producer, 7)
    await producer.flush()
    consumer = await _sub(client, topic, batch_receive_policy=BatchReceivePolicy(5, -1, 2000))
    first = await consumer.batch_receive()
    assert len(first) == 5
    rest: list[Message] = []
    while len(rest) < 2:
        rest += await consumer.batch_receive()
    assert [m.data() for m in first + rest] == [f"m{i}".encode() for i in range(7)]
    await consumer.acknowledge_cumulative(rest[-1])


async def test_zero_queue_consumer(client: Client, broker: BrokerUnderTest) -> None:
    """SEM-2.4: a zero-queue consumer asks for one message per receive."""
    topic = broker.topic("zeroq")
    producer = await _producer(client, topic)
    await _send(producer, 3)
    consumer = await _sub(client, topic, receiver_queue_size=0)
    for i in range(3):
        msg = await consumer.receive(5000)
        assert msg.data() == f"m{i}".encode()
        await consumer.acknowledge(msg)


async def test_listener_pause_and_resume(client: Client, broker: BrokerUnderTest) -> None:
    """The message listener gets every message; pause holds them until resume."""
    topic = broker.topic("listener")
    seen: asyncio.Queue[bytes] = asyncio.Queue()

    async def listener(consumer: Consumer, msg: Message) -> None:
        await seen.put(msg.data())
        await consumer.acknowledge(msg)

    consumer = await _sub(client, topic, message_listener=listener)
    with pytest.raises(errors.InvalidConfiguration):
        await consumer.receive(10)
    producer = await _producer(client, topic)
    await _send(producer, 2)
    assert [await asyncio.wait_for(seen.get(), 5) for _ in range(2)] == [b"m0", b"m1"]
    consumer.pause_message_listener()
    await _send(producer, 1, "p")
    await asyncio.sleep(0.3)
    assert seen.empty()
    consumer.resume_message_listener()
    assert await asyncio.wait_for(seen.get(), 5) == b"p0"


async def test_get_last_message_id(client: Client, broker: BrokerUnderTest) -> None:
    """WIRE: GET_LAST_MESSAGE_ID names the newest message of the topic."""
    topic = broker.topic("lastid")
    producer = await _producer(client, topic)
    ids = [await producer.send(OutgoingMessage(f"m{i}".encode())) for i in range(3)]
    consumer = await _sub(client, topic)
    last = await consumer.get_last_message_id()
    assert (last.ledger_id, last.entry_id) == (ids[-1].ledger_id, ids[-1].entry_id)


async def test_seek_to_id_and_time(client: Client, broker: BrokerUnderTest) -> None:
    """WIRE 12: after a seek to an id the broker delivers from it again, and the
    consumer hands out what follows it (the id too with
    start_message_id_inclusive, SEM-1), as the official client; to a future
    time, nothing."""
    broker.require("seek")
    topic = broker.topic("seek")
    producer = await _producer(client, topic)
    ids = [await producer.send(OutgoingMessage(f"m{i}".encode())) for i in range(4)]
    consumer = await _sub(client, topic)
    for _ in range(4):
        await consumer.acknowledge(await consumer.receive(5000))
    await consumer.seek(ids[2])
    assert [m.data() for m in await _drain(consumer, 1000)] == [b"m3"]
    await consumer.seek(int(time.time() * 1000) + 60_000)
    assert await _drain(consumer, 500) == []
    inclusive = await _sub(client, topic, "inclusive", start_message_id_inclusive=True)
    await inclusive.seek(ids[2])
    assert [m.data() for m in await _drain(inclusive, 1000)] == [b"m2", b"m3"]


async def test_chunked_message_ack_acks_every_chunk(
    client: Client, broker: BrokerUnderTest
) -> None:
    """SEM-8.2: acking a reassembled message acks all its chunks."""
    topic = broker.topic("chunks")
    conf = ProducerConfiguration(
        batching_enabled=False, chunking_enabled=True, chunk_max_message_size=1000
    )
    producer = await client.create_producer(topic, conf)
    payload = bytes(range(256)) * 20
    await producer.send(OutgoingMessage(payload))
    consumer = await _sub(client, topic, max_pending_chunked_message=2)
    msg = await consumer.receive(5000)
    assert msg.data() == payload and len(msg.ack_ids) > 1
    await consumer.acknowledge(msg)
    await consumer.close()
    assert await _drain(await _sub(client, topic)) == []


async def test_dead_letter_after_max_redeliveries(client: Client, broker: BrokerUnderTest) -> None:
    """SEM-6.1 (amended): delivered with redelivery counts 0 .. max; the nack of
    the last delivery sends it to the DLQ, acked here, never delivered again."""
    topic = broker.topic("dlq")
    producer = await _producer(client, topic)
    consumer = await _sub(
        client,
        topic,
        consumer_type=ConsumerType.Shared,
        negative_ack_redelivery_delay_ms=50,
        dead_letter_policy=DeadLetterPolicy(2, initial_subscription_name="dlq-sub"),
    )
    await producer.send(OutgoingMessage(b"poison", properties={"k": "v"}))
    counts = []
    for _ in range(3):
        msg = await consumer.receive(5000)
        counts.append(msg.redelivery_count())
        consumer.negative_acknowledge(msg)
    assert counts == [0, 1, 2]
    # Subscribed while the DLQ publish may be under way: the initial subscription
    # (created first by the handler, or by us) holds the message either way.
    # Shared: the handler's own short-lived consumer of it may still be there.
    dlq = await _sub(client, f"{topic}-sub-DLQ", "dlq-sub", consumer_type=ConsumerType.Shared)
    dead = await dlq.receive(10000)
    assert dead.data() == b"poison"
    assert dead.properties()["k"] == "v" and dead.properties()[REAL_TOPIC] == topic
    assert await _drain(consumer, 500) == []


async def test_reconsume_later_counts_then_dead_letters(
    client: Client, broker: BrokerUnderTest
) -> None:
    """SEM-6.2: reconsume_later arrives again after its delay with RECONSUMETIMES + 1; past
    the maximum it lands in the DLQ."""
    broker.require("delayed_delivery")
    topic = broker.topic("retry")
    producer = await _producer(client, topic)
    consumer = await _sub(
        client,
        topic,
        consumer_type=ConsumerType.Shared,
        enable_retry=True,
        dead_letter_policy=DeadLetterPolicy(2, initial_subscription_name="dlq-sub"),
    )
    dlq = await _sub(client, f"{topic}-sub-DLQ", "dlq-sub")
    await producer.send(OutgoingMessage(b"later"))
    msg = await consumer.receive(5000)
    for times in (1, 2):
        sent = time.time()
        await consumer.reconsume_later(msg, 300)
        msg = await consumer.receive(10000)
        assert time.time() - sent >= 0.25
        assert msg.properties()[RECONSUMETIMES] == str(times)
        assert msg.topic_name() == f"{topic}-sub-RETRY"
    await consumer.reconsume_later(msg, 300)
    dead = await dlq.receive(10000)
    assert dead.data() == b"later" and dead.properties()[RECONSUMETIMES] == "3"
    assert await _drain(consumer, 500) == []


async def test_dead_letter_after_ack_timeouts(client: Client, broker: BrokerUnderTest) -> None:
    """SEM-6.1 / 6.3: ack timeouts count through the broker's redelivery count; the
    delivery at the maximum that times out sends the message to the DLQ instead
    of the application."""
    topic = broker.topic("dlqtimeout")
    producer = await _producer(client, topic)
    consumer = await _sub(
        client,
        topic,
        consumer_type=ConsumerType.Shared,
        unacked_messages_timeout_ms=1000,
        dead_letter_policy=DeadLetterPolicy(1, dead_letter_topic=f"{topic}-dead"),
    )
    dlq = await _sub(client, f"{topic}-dead", "dlq")
    await producer.send(OutgoingMessage(b"slow"))
    first = await consumer.receive(5000)
    assert first.redelivery_count() == 0  # never acked: times out, comes back with count 1
    last = await consumer.receive(5000)
    assert last.redelivery_count() == 1  # the last delivery: its time-out dead-letters it
    dead = await dlq.receive(10000)
    assert dead.data() == b"slow" and dead.properties()[REAL_TOPIC] == topic
    assert await _drain(consumer, 1500) == []
