"""MultiTopicsConsumer: one subscription over several topics or the partitions
of a partitioned topic (SEMANTICS 1: topics consumers).

Each topic (partition) has its own single-topic Consumer; their messages go
into one shared IncomingQueue through `set_message_sink`, carrying their
topic. Acks, nacks and cumulative acks are routed to the consumer of the
message's topic; a bare MessageId is routed by its partition index on a
partitioned topic, and refused with OperationNotSupported when it cannot name
its topic (as the official client refuses it). With enable_retry each topic's
retry consumer feeds the shared queue too, and its messages are routed to the
topic's consumer (which hands them to its retry consumer).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from magnetar.client.aio.config import ConsumerConfiguration
from magnetar.client.aio.consumer.consumer import Consumer
from magnetar.client.aio.consumer.discovery import ListTopics, PatternDiscovery
from magnetar.client.aio.consumer.incoming_queue import IncomingQueue
from magnetar.client.aio.consumer.listener import ListenerRunner
from magnetar.client.aio.consumer.topic_watcher import Connect
from magnetar.client.aio.errors import (
    InvalidConfiguration,
    OperationNotSupported,
)
from magnetar.client.aio.log import get_logger
from magnetar.client.aio.message import Message
from magnetar.proto.ids import MessageId

SubscribeOne = Callable[[Any, str, ConsumerConfiguration], Awaitable[Consumer]]

_log = get_logger("magnetar.client.sync.consumer")


class MultiTopicsConsumer:
    def __init__(self, topic: str, subscription: str, conf: ConsumerConfiguration) -> None:
        self._topic = topic
        self.subscription = subscription
        self.conf = conf
        self.queue = IncomingQueue()
        self.consumers: dict[str, Consumer] = {}
        self._by_partition: dict[int, Consumer] = {}
        # Delivered, not yet acked: which topic an id came from, so that
        # acking `msg.message_id()` works as with the official client.
        self._topic_of: dict[MessageId, str] = {}
        # SEM-6.2: a retry topic's name -> the topic whose consumer owns it.
        self._retry_of: dict[str, str] = {}
        # The blocking facade's hooks (as on the single-topic Consumer).
        self._app_sink: Callable[[Any, list[Message]], None] | None = None
        self._message_class: type[Message] = Message
        self.on_queue_cleared: Callable[[], None] | None = None
        self.on_closed: Callable[[], None] | None = None
        self._discovery: PatternDiscovery | None = None
        self._parse: Callable[[str], Any] = str
        self._listener: ListenerRunner | None = None
        if conf.receiver_queue_size == 0:
            raise InvalidConfiguration("a zero receiver queue cannot be used over several topics")
        if conf.message_listener is not None:
            self._listener = ListenerRunner(self, conf.message_listener, self._next_for_listener)

    async def start(self, names: Sequence[Any], subscribe_one: SubscribeOne) -> None:
        """Subscribe to every topic; on a failure, leave the ones made so far."""
        self._subscribe_one = subscribe_one
        try:
            for name in names:
                await self._add(name)
        except BaseException:
            await self.close()
            raise
        if self._listener is not None:
            self._listener.start()

    async def _add(self, name: Any) -> None:
        per_topic = self.conf
        if per_topic.message_listener is not None:
            per_topic = _without_listener(per_topic)
        consumer = await self._subscribe_one(name, self.subscription, per_topic)
        consumer.set_message_sink(self._sink)
        consumer.set_message_class(self._message_class)
        retry = consumer.retry_consumer
        if retry is not None:  # its sink was the topic consumer's own queue
            retry.set_message_sink(self._sink)
            retry.set_message_class(self._message_class)
            self._retry_of[retry.topic()] = str(name)
        self.consumers[str(name)] = consumer
        if name.partition_index >= 0:
            self._by_partition[name.partition_index] = consumer
        # What arrived before the sink was set is handed on in order.
        queued = consumer.queue.clear()
        if queued:
            self._sink(consumer, [self._message_class.of(m) for m in queued])

    def discover(
        self,
        list_topics: ListTopics,
        parse: Callable[[str], Any],
        period: float,
        watch: tuple[str, Connect] | None = None,
    ) -> None:
        """Pattern consumers: subscribe to topics that appear and leave those
        that go (SEM-1 pattern_auto_discovery_period; discovery.py)."""
        self._parse = parse
        self._discovery = PatternDiscovery(self, self._topic, list_topics, period, watch=watch)
        self._discovery.start()

    # DiscoveryOwner
    def topic_names(self) -> set[str]:
        return set(self.consumers)

    async def add_topic(self, name: str) -> None:
        await self._add(self._parse(name))

    async def remove_topic(self, name: str) -> None:
        consumer = self.consumers.pop(name, None)
        if consumer is not None:
            if consumer.retry_consumer is not None:
                self._retry_of.pop(consumer.retry_consumer.topic(), None)
            await consumer.close()

    def _sink(self, _consumer: Consumer, messages: list[Message]) -> None:
        sink = self._app_sink
        if sink is not None:
            sink(self, messages)
        else:
            self.queue.put_many(messages)

    def set_message_sink(self, sink: Callable[[Any, list[Message]], None] | None) -> None:
        """Route every topic's messages to `sink` (the blocking facade's buffer)."""
        self._app_sink = sink

    def set_message_class(self, cls: type[Message]) -> None:
        """Build every topic's received messages as `cls`."""
        self._message_class = cls
        for consumer in self.consumers.values():
            consumer.set_message_class(cls)

    def request_one(self) -> None:
        """Zero-queue consumers are refused at creation; nothing to ask for."""

    def message_delivered(self, msg: Message) -> None:
        self._delivered(msg)

    def messages_delivered(self, messages: Sequence[Message]) -> None:
        for msg in messages:
            self._delivered(msg)

    # -- the official surface ---------------------------------------------

    def topic(self) -> str:
        return self._topic

    def subscription_name(self) -> str:
        return self.subscription

    def consumer_name(self) -> str:
        first = next(iter(self.consumers.values()), None)
        return first.consumer_name() if first is not None else ""

    def is_connected(self) -> bool:
        return bool(self.consumers) and all(c.is_connected() for c in self.consumers.values())

    def _owner(self, target: Message | MessageId) -> Consumer:
        if isinstance(target, Message):
            owner = self._of_topic(target.topic_name())
            if owner is not None:
                return owner
        elif target in self._topic_of:
            owner = self._of_topic(self._topic_of[target])
            if owner is not None:
                return owner
        elif len(self.consumers) == 1:
            return next(iter(self.consumers.values()))
        elif target.partition >= 0 and target.partition in self._by_partition:
            return self._by_partition[target.partition]
        raise OperationNotSupported(
            "a multi-topic consumer needs the message (or an id that names its partition)"
        )

    def _of_topic(self, topic: str) -> Consumer | None:
        return self.consumers.get(self._retry_of.get(topic, topic))

    def note_topic(self, msg_id: MessageId, topic: str) -> None:
        """`msg_id` belongs to `topic` (an id the application knows the topic
        of, such as one it deserialized with its topic)."""
        if self._of_topic(topic) is not None:
            self._topic_of[msg_id] = topic

    def check_target(self, target: Message | MessageId) -> None:
        """Raise OperationNotSupported now (in the caller's thread) for an id
        this consumer cannot route."""
        self._owner(target)

    def _delivered(self, msg: Message) -> Message:
        self._owner(msg).message_delivered(msg)
        self._topic_of[msg.proto_message_id()] = msg.topic_name()
        return msg

    async def _next_for_listener(self) -> Message:
        return self._delivered(await self.queue.get(None))

    async def receive(self, timeout_millis: int | None = None) -> Message:
        if self._listener is not None:
            raise InvalidConfiguration("receive() cannot be used with a message listener")
        return self._delivered(await self.queue.get(timeout_millis))

    async def batch_receive(self) -> list[Message]:
        messages = await self.queue.get_batch(self.conf.batch_receive_policy)
        return [self._delivered(m) for m in messages]

    def _forget(self, target: Message | MessageId) -> Consumer:
        owner = self._owner(target)
        self._topic_of.pop(
            target.proto_message_id() if isinstance(target, Message) else target, None
        )
        return owner

    def ack_nowait(self, target: Message | MessageId) -> asyncio.Future[None] | None:
        return self._forget(target).ack_nowait(target)

    def ack_many(self, targets: Sequence[Message | MessageId]) -> None:
        for target in targets:
            self._forget(target).ack_nowait(target)

    async def acknowledge(self, target: Message | MessageId) -> None:
        await self._forget(target).acknowledge(target)

    def check_cumulative(self) -> None:
        for consumer in self.consumers.values():
            consumer.check_cumulative()
            return

    def ack_cumulative_nowait(self, target: Message | MessageId) -> asyncio.Future[None] | None:
        return self._owner(target).ack_cumulative_nowait(target)

    async def acknowledge_cumulative(self, target: Message | MessageId) -> None:
        await self._owner(target).acknowledge_cumulative(target)

    def negative_acknowledge(self, target: Message | MessageId) -> None:
        self._owner(target).negative_acknowledge(target)

    def redeliver_unacknowledged_messages(self) -> None:
        self.queue.clear()
        self._topic_of.clear()
        if self.on_queue_cleared is not None:
            self.on_queue_cleared()
        for consumer in self.consumers.values():
            consumer.redeliver_unacknowledged_messages()

    def pause_message_listener(self) -> None:
        if self._listener is not None:
            self._listener.pause()

    def resume_message_listener(self) -> None:
        if self._listener is not None:
            self._listener.resume()

    async def seek(self, target: MessageId | int) -> None:
        """By publish time: every partition; by id: the partition it names."""
        self.queue.clear()
        if self.on_queue_cleared is not None:
            self.on_queue_cleared()
        if isinstance(target, int):
            await asyncio.gather(*(c.seek(target) for c in self.consumers.values()))
        else:
            await self._owner(target).seek(target)

    async def get_last_message_id(self) -> MessageId:
        raise OperationNotSupported("get_last_message_id on a multi-topic consumer")

    async def reconsume_later(
        self, message: Message, delay_millis: int, properties: dict[str, str] | None = None
    ) -> None:
        await self._owner(message).reconsume_later(message, delay_millis, properties)

    async def unsubscribe(self) -> None:
        await asyncio.gather(*(c.unsubscribe() for c in self.consumers.values()))
        await self.close()

    async def close(self) -> None:
        discovery, self._discovery = self._discovery, None
        if discovery is not None:
            await discovery.close()
        if self._listener is not None:
            await self._listener.stop()
        consumers = list(self.consumers.values())
        await asyncio.gather(*(c.close() for c in consumers), return_exceptions=True)
        self.queue.clear()
        if self.on_closed is not None:
            self.on_closed()


def _without_listener(conf: ConsumerConfiguration) -> ConsumerConfiguration:
    import dataclasses

    return dataclasses.replace(conf, message_listener=None)
