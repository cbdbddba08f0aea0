"""Our async producer (and basic consumer) against each broker: every producer feature."""

from __future__ import annotations

import asyncio
import os

import pytest

from magnetar.client.aio import (
    BatchingType,
    Client,
    CompressionType,
    Consumer,
    ConsumerConfiguration,
    InitialPosition,
    MessageId,
    OutgoingMessage,
    PartitionsRoutingMode,
    Producer,
    ProducerConfiguration,
    errors,
)
from magnetar.client.aio.enums import ProducerAccessMode
from magnetar.client.aio.producer.partitioned import PartitionedProducer
from tests.interop.conftest import PARTITIONS, BrokerUnderTest

pytestmark = pytest.mark.lite


async def _consumer(client: Client, topic: str, **options: object) -> Consumer:
    options.setdefault("initial_position", InitialPosition.Earliest)
    consumer = await client.subscribe(topic, "sub", ConsumerConfiguration.from_keywords(options))
    assert isinstance(consumer, Consumer)
    return consumer


async def send_all(
    producer: Producer | PartitionedProducer, messages: list[OutgoingMessage]
) -> list[MessageId]:
    """send_async every message, flush, and return the ids in order."""
    loop = asyncio.get_running_loop()
    futures: list[asyncio.Future[MessageId]] = []
    for msg in messages:
        future: asyncio.Future[MessageId] = loop.create_future()

        def done(
            error: object, msg_id: MessageId | None, f: asyncio.Future[MessageId] = future
        ) -> None:
            if isinstance(error, BaseException):
                f.set_exception(error)
            else:
                assert msg_id is not None
                f.set_result(msg_id)

        producer.send_async(msg, done)
        futures.append(future)
    await producer.flush()
    return list(await asyncio.gather(*futures))


async def _single(client: Client, topic: str, **options: object) -> Producer:
    producer = await client.create_producer(topic, ProducerConfiguration.from_keywords(options))
    assert isinstance(producer, Producer)
    return producer


async def test_send_and_receive_with_message_options(
    client: Client, broker: BrokerUnderTest
) -> None:
    """SEM-9: PRODUCER, SEND -> SEND_RECEIPT; the consumer sees every option we set."""
    topic = broker.topic()
    producer = await _single(client, topic, batching_enabled=False, producer_name="p-opts")
    assert producer.is_connected()
    msg_id = await producer.send(
        OutgoingMessage(
            b"payload",
            properties={"b": "2", "a": "1"},
            partition_key="pk",
            ordering_key=b"ok",
            event_time=1234,
        )
    )
    assert msg_id.entry_id >= 0 and msg_id.batch_index == -1
    null_id = await producer.send(OutgoingMessage(b"", null_value=True))
    assert null_id > msg_id
    consumer = await _consumer(client, topic)
    msg = await consumer.receive(5000)
    assert msg.data() == b"payload"
    assert msg.properties() == {"a": "1", "b": "2"}
    assert msg.partition_key() == "pk"
    assert msg.ordering_key() == "ok"
    assert msg.event_timestamp() == 1234
    assert msg.producer_name() == "p-opts"
    assert msg.message_id() == msg_id
    assert msg.publish_timestamp() > 0
    null = await consumer.receive(5000)
    assert null.has_null_value() and null.data() == b""
    assert producer.producer_name() == "p-opts"
    assert producer.topic() == topic


async def test_batched_sends_share_an_entry_in_order(
    client: Client, broker: BrokerUnderTest
) -> None:
    """SEM-8.3: the default batcher packs messages into one entry, indexes in send order."""
    topic = broker.topic()
    producer = await _single(
        client, topic, batching_enabled=True, batching_max_publish_delay_ms=1000
    )
    ids = await send_all(producer, [OutgoingMessage(b"m%d" % i) for i in range(20)])
    assert {(i.ledger_id, i.entry_id) for i in ids} == {(ids[0].ledger_id, ids[0].entry_id)}
    assert [i.batch_index for i in ids] == list(range(20))
    consumer = await _consumer(client, topic)
    received = [await consumer.receive(5000) for _ in range(20)]
    assert [m.data() for m in received] == [b"m%d" % i for i in range(20)]
    assert [m.message_id() for m in received] == ids


async def test_batch_limits_split_batches(client: Client, broker: BrokerUnderTest) -> None:
    """SEM-8.3: batching_max_messages and batching_max_allowed_size_in_bytes close a batch."""
    topic = broker.topic()
    by_count = await _single(
        client, topic, batching_enabled=True, batching_max_messages=5,
        batching_max_publish_delay_ms=5000,
    )  # fmt: skip
    ids = await send_all(by_count, [OutgoingMessage(b"x") for _ in range(12)])
    entries = [(i.ledger_id, i.entry_id) for i in ids]
    assert len(set(entries)) == 3  # 5 + 5 + 2 (the last two by flush)
    by_size = await _single(
        client, topic, batching_enabled=True, batching_max_allowed_size_in_bytes=1000,
        batching_max_publish_delay_ms=5000,
    )  # fmt: skip
    sizes = [
        (i.ledger_id, i.entry_id)
        for i in await send_all(by_size, [OutgoingMessage(b"y" * 400) for _ in range(5)])
    ]
    assert len(set(sizes)) == 3  # 2 + 2 + 1 messages of 400 bytes under a 1000-byte cap


async def test_key_based_batching_groups_by_key(client: Client, broker: BrokerUnderTest) -> None:
    """SEM-8.3 / SEM-4.4.5: one batch per key, each entry keyed by its messages' key."""
    topic = broker.topic()
    producer = await _single(
        client, topic, batching_enabled=True, batching_type=BatchingType.KeyBased,
        batching_max_publish_delay_ms=5000,
    )  # fmt: skip
    keys = ["a", "b", "c"] * 4
    ids = await send_all(producer, [OutgoingMessage(k.encode(), partition_key=k) for k in keys])
    entry_of = {k: {(i.ledger_id, i.entry_id) for kk, i in zip(keys, ids, strict=True) if kk == k}
                for k in "abc"}  # fmt: skip
    assert all(len(entries) == 1 for entries in entry_of.values())
    assert len({next(iter(e)) for e in entry_of.values()}) == 3
    consumer = await _consumer(client, topic)
    received = [await consumer.receive(5000) for _ in keys]
    assert sorted(m.partition_key() for m in received) == sorted(keys)
    assert all(m.data().decode() == m.partition_key() for m in received)


@pytest.mark.parametrize("codec", list(CompressionType))
async def test_compression_round_trip(
    client: Client, broker: BrokerUnderTest, codec: CompressionType
) -> None:
    """SEM-8.4: every codec, batched and not; the broker never looks inside."""
    topic = broker.topic()
    payloads = [os.urandom(50) + b"z" * 500 for _ in range(6)]
    single = await _single(client, topic, batching_enabled=False, compression_type=codec)
    batched = await _single(client, topic, batching_enabled=True, compression_type=codec)
    for p in payloads[:3]:
        await single.send(OutgoingMessage(p))
    await send_all(batched, [OutgoingMessage(p) for p in payloads[3:]])
    consumer = await _consumer(client, topic)
    received = [(await consumer.receive(5000)).data() for _ in payloads]
    assert received == payloads


async def test_chunking_splits_and_reassembles(client: Client, broker: BrokerUnderTest) -> None:
    """SEM-8.2: a message over the chunk size goes as chunks sharing a uuid; reassembled whole."""
    topic = broker.topic()
    producer = await _single(
        client, topic, batching_enabled=False, chunking_enabled=True,
        chunk_max_message_size=10_000, compression_type=CompressionType.LZ4,
    )  # fmt: skip
    big = os.urandom(35_000)
    small = b"after"
    big_id = await producer.send(OutgoingMessage(big, properties={"k": "v"}))
    small_id = await producer.send(OutgoingMessage(small))
    # 35,000 random bytes stay ~35,000 after LZ4: four chunk entries before `small`.
    assert small_id.entry_id - big_id.entry_id == 1
    consumer = await _consumer(client, topic)
    msg = await consumer.receive(5000)
    assert msg.data() == big
    assert msg.properties() == {"k": "v"}
    assert len(msg.ack_ids) == 4
    assert (await consumer.receive(5000)).data() == small
    await consumer.acknowledge(msg)


async def test_message_over_max_size_without_chunking_is_rejected(
    client: Client, broker: BrokerUnderTest
) -> None:
    """SEM-8.2: without chunking an oversized message fails at once with MessageTooBig."""
    producer = await _single(client, broker.topic(), batching_enabled=False)
    too_big = b"x" * (producer.max_message_size + 1)
    with pytest.raises(errors.MessageTooBig):
        await producer.send(OutgoingMessage(too_big))
    batched = await _single(client, broker.topic(), batching_enabled=True)
    with pytest.raises(errors.MessageTooBig):
        await batched.send(OutgoingMessage(too_big))
    assert (await producer.send(OutgoingMessage(b"fine"))).entry_id >= 0


async def test_sequence_ids(client: Client, broker: BrokerUnderTest) -> None:
    """initial_sequence_id + 1 comes first; user-given ids pass through; last_sequence_id."""
    topic = broker.topic()
    producer = await _single(client, topic, batching_enabled=False, initial_sequence_id=41)
    assert producer.last_sequence_id() == 41
    await producer.send(OutgoingMessage(b"a"))
    assert producer.last_sequence_id() == 42
    await producer.send(OutgoingMessage(b"b", sequence_id=100))
    assert producer.last_sequence_id() == 100
    fresh = await _single(client, topic, batching_enabled=False)
    assert fresh.last_sequence_id() == -1
    await fresh.send(OutgoingMessage(b"c"))
    assert fresh.last_sequence_id() == 0


async def test_queue_full_fails_fast_or_blocks(client: Client, broker: BrokerUnderTest) -> None:
    """max_pending_messages: a clear ProducerQueueIsFull, or waiting with block_if_queue_full."""
    topic = broker.topic()
    producer = await _single(
        client, topic, batching_enabled=True, max_pending_messages=3,
        batching_max_publish_delay_ms=60_000,
    )  # fmt: skip
    for _ in range(3):
        producer.send_async(OutgoingMessage(b"q"), None)
    with pytest.raises(errors.ProducerQueueIsFull):
        producer.send_async(OutgoingMessage(b"q"), None)
    await producer.flush()
    assert producer.pending_count == 0
    blocking = await _single(
        client, topic, batching_enabled=False, max_pending_messages=2, block_if_queue_full=True
    )
    ids = await asyncio.gather(*(blocking.send(OutgoingMessage(b"%d" % i)) for i in range(10)))
    assert len(set(ids)) == 10


async def test_partitioned_routing_modes(broker: BrokerUnderTest) -> None:
    """Round robin spreads, single partition pins, keys hash, a custom router routes."""
    url, topic = broker.partitioned_topic()
    async with Client(url, operation_timeout_seconds=5) as client:
        assert len(await client.get_topic_partitions(topic)) == PARTITIONS
        rr = await client.create_producer(topic, ProducerConfiguration(batching_enabled=False))
        assert isinstance(rr, PartitionedProducer)
        ids = [await rr.send(OutgoingMessage(b"r")) for _ in range(PARTITIONS * 2)]
        assert sorted({i.partition for i in ids}) == list(range(PARTITIONS))
        single = await client.create_producer(topic, ProducerConfiguration(
            batching_enabled=False,
            message_routing_mode=PartitionsRoutingMode.UseSinglePartition,
        ))  # fmt: skip
        assert len({(await single.send(OutgoingMessage(b"s"))).partition for _ in range(6)}) == 1
        keyed = {(await rr.send(OutgoingMessage(b"k", partition_key="same"))).partition
                 for _ in range(5)}  # fmt: skip
        assert len(keyed) == 1
        router = ProducerConfiguration(
            batching_enabled=False, message_router=lambda msg, n: int(msg.data()) % n
        )
        custom = await client.create_producer(topic, router)
        parts = [(await custom.send(OutgoingMessage(b"%d" % i))).partition for i in range(6)]
        assert parts == [i % PARTITIONS for i in range(6)]
        consumer = await _consumer(client, f"{topic}-partition-1")
        got = await consumer.receive(5000)
        assert got.message_id().partition == 1
        await rr.flush()
        assert rr.is_connected()


async def test_access_modes(client: Client, broker: BrokerUnderTest) -> None:
    """WIRE 7: a second Exclusive producer is refused; Shared producers coexist."""
    broker.require("access_modes")
    topic = broker.topic()
    first = await _single(client, topic, access_mode=ProducerAccessMode.Exclusive)
    with pytest.raises((errors.ProducerFenced, errors.ProducerBusy)):
        await _single(client, topic, access_mode=ProducerAccessMode.Exclusive)
    shared_topic = broker.topic()
    a = await _single(client, shared_topic, access_mode=ProducerAccessMode.Shared)
    b = await _single(client, shared_topic, access_mode=ProducerAccessMode.Shared)
    assert (await a.send(OutgoingMessage(b"a"))) != (await b.send(OutgoingMessage(b"b")))
    await first.close()


async def test_wait_for_exclusive_waits_its_turn(client: Client, broker: BrokerUnderTest) -> None:
    """WIRE 6: WaitForExclusive stays pending until the exclusive producer leaves."""
    broker.require("wait_for_exclusive")
    topic = broker.topic()
    first = await _single(client, topic, access_mode=ProducerAccessMode.Exclusive)
    waiting = asyncio.ensure_future(
        _single(client, topic, access_mode=ProducerAccessMode.WaitForExclusive)
    )
    await asyncio.sleep(0.2)
    assert not waiting.done()
    await first.close()
    second = await asyncio.wait_for(waiting, 5)
    assert (await second.send(OutgoingMessage(b"mine now"))).entry_id >= 0


async def test_exclusive_with_fencing_fences_the_old_producer(
    client: Client, broker: BrokerUnderTest
) -> None:
    """WIRE 7: ExclusiveWithFencing closes the old producer; it then fails with ProducerFenced."""
    broker.require("access_modes")
    topic = broker.topic()
    old = await _single(client, topic, access_mode=ProducerAccessMode.Exclusive)
    await old.send(OutgoingMessage(b"before"))
    new = await _single(client, topic, access_mode=ProducerAccessMode.ExclusiveWithFencing)
    assert (await new.send(OutgoingMessage(b"after"))).entry_id >= 0
    async with asyncio.timeout(5):
        while old.is_connected() or old.failure is None:  # noqa: ASYNC110 (broker-driven state)
            await asyncio.sleep(0.01)
    assert isinstance(old.failure, errors.ProducerFenced)
    with pytest.raises(errors.ProducerFenced):
        await old.send(OutgoingMessage(b"fenced"))


async def test_close_is_idempotent_and_fails_later_sends(
    client: Client, broker: BrokerUnderTest
) -> None:
    producer = await _single(client, broker.topic(), batching_enabled=True)
    answers: list[tuple[object, object]] = []
    producer.send_async(OutgoingMessage(b"last"), lambda e, i: answers.append((e, i)))
    await producer.close()
    # close sends what was batched and waits for its receipt first.
    assert len(answers) == 1 and answers[0][0] is None
    await producer.close()
    with pytest.raises(errors.AlreadyClosed):
        await producer.send(OutgoingMessage(b"late"))
    assert not producer.is_connected()
