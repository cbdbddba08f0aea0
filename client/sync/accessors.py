"""The read-only accessors the producer and consumer facades (the blocking
ones here and `pulsar.asyncio`'s in client/asyncio.py) answer from the core
object they wrap, written once for both."""

from __future__ import annotations

from magnetar.client.aio.consumer.consumer import Consumer as _AioConsumer
from magnetar.client.aio.consumer.multi_topic import MultiTopicsConsumer as _AioMultiConsumer
from magnetar.client.aio.producer.partitioned import PartitionedProducer as _AioPartitioned
from magnetar.client.aio.producer.producer import Producer as _AioProducer


class ProducerAccessors:
    _producer: _AioProducer | _AioPartitioned

    def topic(self) -> str:
        return self._producer.topic()

    def producer_name(self) -> str:
        return self._producer.producer_name()

    def last_sequence_id(self) -> int:
        """The highest sequence id the broker acknowledged (-1 before any)."""
        return self._producer.last_sequence_id()

    def is_connected(self) -> bool:
        return self._producer.is_connected()


class ConsumerAccessors:
    _consumer: _AioConsumer | _AioMultiConsumer

    def topic(self) -> str:
        return self._consumer.topic()

    def subscription_name(self) -> str:
        return self._consumer.subscription_name()

    def consumer_name(self) -> str:
        return self._consumer.consumer_name()

    def is_connected(self) -> bool:
        return self._consumer.is_connected()
