"""Opening readers: one Reader on a topic or a partition, or a
PartitionedReader over every partition of a partitioned topic, each partition
starting at the same message id (as Pulsar's multi-topic reader does; see
partitioned.py)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable

from magnetar.client.aio.config import ConsumerConfiguration
from magnetar.client.aio.consumer.consumer import Consumer
from magnetar.client.aio.net.context import ClientContext
from magnetar.client.aio.reader.partitioned import PartitionedReader
from magnetar.client.aio.reader.reader import Reader
from magnetar.proto.naming import TopicName

# Registers a consumer with its client and starts it (undone on failure).
StartEndpoint = Callable[[Consumer], Awaitable[None]]


async def open_reader(
    context: ClientContext,
    name: TopicName,
    partitions: int,
    conf: ConsumerConfiguration,
    subscription_prefix: str | None,
    start_endpoint: StartEndpoint,
) -> Reader | PartitionedReader:
    """A reader of `name` (`partitions` > 0: of each of its partitions) with a
    non-durable subscription named after `subscription_prefix`."""
    if partitions == 0:
        return await _open_one(context, name, conf, subscription_prefix, start_endpoint)
    readers: list[Reader] = []
    try:
        for index in range(partitions):
            readers.append(
                await _open_one(
                    context, name.partition(index), conf, subscription_prefix, start_endpoint
                )
            )
    except BaseException:
        await asyncio.gather(*(r.close() for r in readers), return_exceptions=True)
        raise
    reader_set = PartitionedReader(str(name), readers, conf.receiver_queue_size)
    context.endpoints.add(reader_set)
    return reader_set


async def _open_one(
    context: ClientContext,
    name: TopicName,
    conf: ConsumerConfiguration,
    subscription_prefix: str | None,
    start_endpoint: StartEndpoint,
) -> Reader:
    subscription = f"{subscription_prefix or 'reader'}-{uuid.uuid4().hex[:10]}"
    consumer = Consumer(context, name, subscription, conf)
    await start_endpoint(consumer)
    assert conf.start_message_id is not None  # a reader's configuration names it
    reader = Reader(consumer, conf.start_message_id, conf.start_message_id_inclusive)
    try:
        await reader.start()
    except BaseException:
        await consumer.close()
        raise
    return reader
