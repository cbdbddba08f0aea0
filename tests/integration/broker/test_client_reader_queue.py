"""Our client's Reader against our broker: what waits in its queue to be
dropped is no message available (SEM-5.6)."""

from __future__ import annotations

import asyncio
import uuid

from magnetar.client.aio import Client, MessageId, OutgoingMessage, ProducerConfiguration
from magnetar.client.aio.reader.reader import Reader
from tests.support.brokers import BrokerThread
from tests.support.http_calls import http_call
from tests.support.polling import eventually_async


def test_a_queued_start_entry_is_not_available(broker: BrokerThread) -> None:
    """SEM-5.6: the broker delivers a reader's start entry itself, and a
    reader exclusive of it drops it unread; while it still waits in the
    queue, has_message_available says False for a reader after the last
    message, and True once a new message comes."""
    topic = f"persistent://public/default/reader-queue-{uuid.uuid4().hex[:8]}"

    async def scenario() -> None:
        client = Client(broker.url, operation_timeout_seconds=10)
        try:
            producer = await client.create_producer(
                topic, ProducerConfiguration(batching_enabled=False)
            )
            ids = [await producer.send(OutgoingMessage(b"m%d" % i)) for i in range(3)]
            reader = await client.create_reader(topic, ids[-1])
            assert isinstance(reader, Reader)
            await eventually_async(
                "the start entry reaches the reader's queue",
                lambda: len(reader.consumer.queue) == 1,
            )
            assert not await reader.has_message_available()
            await producer.send(OutgoingMessage(b"next"))
            assert await reader.has_message_available()
            assert (await reader.read_next(5000)).data() == b"next"
        finally:
            await client.close()

    asyncio.run(scenario())


def test_read_many_takes_what_is_queued_in_order_within_its_limits(
    broker: BrokerThread,
) -> None:
    """SEM-5.6: a reader hands out every message after its start once, in
    order; read_many takes the next one and those queued behind it, at most
    `max_messages` and stopping at the one that reaches `max_bytes`, and
    read_next goes on after the last one it took."""
    topic = f"persistent://public/default/read-many-{uuid.uuid4().hex[:8]}"

    async def scenario() -> None:
        client = Client(broker.url, operation_timeout_seconds=10)
        try:
            producer = await client.create_producer(
                topic, ProducerConfiguration(batching_enabled=False)
            )
            ids = [await producer.send(OutgoingMessage(b"%03d" % i)) for i in range(60)]
            reader = await client.create_reader(topic, ids[4])  # exclusive: from 5 on
            assert isinstance(reader, Reader)
            await eventually_async(
                "the reader's queue holds what follows",
                lambda: len(reader.consumer.queue) >= 40,
            )
            first = await reader.read_many(10, 1 << 20, 5000)
            assert [m.data() for m in first] == [b"%03d" % i for i in range(5, 15)]
            # Three-byte values: the fourth reaches 10 bytes and is the last.
            assert [m.data() for m in await reader.read_many(100, 10, 5000)] == [
                b"%03d" % i for i in range(15, 19)
            ]
            assert (await reader.read_next(5000)).data() == b"019"
            rest: list[bytes] = []
            while len(rest) < 40:
                rest += [m.data() for m in await reader.read_many(100, 1 << 20, 5000)]
            assert rest == [b"%03d" % i for i in range(20, 60)]
        finally:
            await client.close()

    asyncio.run(scenario())


def test_read_many_across_a_resubscription_repeats_nothing(broker: BrokerThread) -> None:
    """SEM-5.6: a reader resubscribes from the last message it handed out
    (the topic unloaded under it, its queue holding what follows);
    read_many then goes on after it, with nothing repeated and nothing
    skipped. A durable subscription holds the messages (SEM-5.4: a reader
    keeps none, and the reload rolls the ledger over)."""
    topic = f"persistent://public/default/read-many-unload-{uuid.uuid4().hex[:8]}"

    async def scenario() -> None:
        client = Client(broker.url, operation_timeout_seconds=10)
        try:
            producer = await client.create_producer(
                topic, ProducerConfiguration(batching_enabled=False)
            )
            await client.subscribe(topic, "hold")
            for i in range(30):
                await producer.send(OutgoingMessage(b"%03d" % i))
            reader = await client.create_reader(topic, MessageId.earliest)
            assert isinstance(reader, Reader)
            got = [m.data() for m in await reader.read_many(12, 1 << 20, 5000)]
            assert got == [b"%03d" % i for i in range(12)]
            status, answer = await asyncio.to_thread(
                http_call,
                "PUT",
                f"{broker.http_url}/admin/v2/{topic.replace('://', '/')}/unload",
            )
            assert status in (200, 204), answer
            for i in range(30, 40):
                await producer.send(OutgoingMessage(b"%03d" % i))
            while len(got) < 40:
                got += [m.data() for m in await reader.read_many(100, 1 << 20, 5000)]
            assert got == [b"%03d" % i for i in range(40)]
        finally:
            await client.close()

    asyncio.run(scenario())
