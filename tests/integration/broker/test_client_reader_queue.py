"""Our client's Reader against our broker: what waits in its queue to be
dropped is no message available (SEM-5.6)."""

from __future__ import annotations

import asyncio
import uuid

from magnetar.client.aio import Client, OutgoingMessage, ProducerConfiguration
from magnetar.client.aio.reader.reader import Reader
from tests.support.brokers import BrokerThread
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
