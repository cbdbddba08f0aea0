"""PartitionedProducer: one Producer per partition behind a Router."""

from __future__ import annotations

import asyncio
import dataclasses

from magnetar.client.aio.config import ProducerConfiguration
from magnetar.client.aio.message import OutgoingMessage, SendCallback
from magnetar.client.aio.net.context import ClientContext
from magnetar.client.aio.producer.producer import Producer
from magnetar.client.aio.producer.routing import Router
from magnetar.proto.ids import MessageId
from magnetar.proto.naming import TopicName


class PartitionedProducer:
    """Looks like a Producer; routes each message to one partition's producer."""

    def __init__(
        self,
        context: ClientContext,
        topic: TopicName,
        conf: ProducerConfiguration,
        num_partitions: int,
    ) -> None:
        self.context = context
        self.topic_name = topic
        self.conf = conf
        self.num_partitions = num_partitions
        self.router = Router(conf, num_partitions)
        # The across-partitions cap splits evenly, as in the official client.
        per_partition = conf.max_pending_messages
        if conf.max_pending_messages_across_partitions > 0:
            share = max(1, conf.max_pending_messages_across_partitions // num_partitions)
            per_partition = min(per_partition, share) if per_partition > 0 else share
        part_conf = dataclasses.replace(conf, max_pending_messages=per_partition)
        self.producers = [
            Producer(context, topic.partition(i), part_conf, partition=i)
            for i in range(num_partitions)
        ]

    async def start(self) -> None:
        results = await asyncio.gather(
            *(producer.start() for producer in self.producers), return_exceptions=True
        )
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            await asyncio.gather(*(p.close() for p in self.producers), return_exceptions=True)
            raise errors[0]

    def topic(self) -> str:
        return str(self.topic_name)

    def producer_name(self) -> str:
        return self.producers[0].producer_name()

    def last_sequence_id(self) -> int:
        return max(p.last_sequence_id() for p in self.producers)

    def is_connected(self) -> bool:
        return all(p.is_connected() for p in self.producers)

    @property
    def pending_count(self) -> int:
        return sum(p.pending_count for p in self.producers)

    def has_capacity(self) -> bool:
        """Whether every partition's producer has room for one more message."""
        return all(p.has_capacity() for p in self.producers)

    async def wait_for_capacity(self) -> None:
        for producer in self.producers:
            await producer.wait_for_capacity()

    def route(self, msg: OutgoingMessage) -> Producer:
        return self.producers[self.router.choose(msg)]

    async def send(self, msg: OutgoingMessage) -> MessageId:
        return await self.route(msg).send(msg)

    def send_async(self, msg: OutgoingMessage, callback: SendCallback | None) -> None:
        self.route(msg).send_async(msg, callback)

    async def flush(self) -> None:
        await asyncio.gather(*(p.flush() for p in self.producers))

    async def close(self) -> None:
        await asyncio.gather(*(p.close() for p in self.producers), return_exceptions=True)
        self.context.endpoints.discard(self)
