"""Retry and dead letter topics (SEM-6).

DeadLetterHandler publishes a consumer's messages to its dead letter topic
(redelivered too often, SEM-6.1) or to its retry topic (`reconsume_later`,
SEM-6.2), then acks the original. A message reaches the application
max_redeliver_count + 1 times: one handed out with redelivery_count >= the
maximum is remembered (LastChance), and when it would come once more (nack,
ack timeout, redelivery of everything unacked) it goes to the dead letter
topic instead. Producers are created on first use, one per
topic, and reused until close. The dead letter topic's initial subscription
is created before the first publish so nothing sent there is missed.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from magnetar.client.aio.errors import AlreadyClosed
from magnetar.client.aio.log import get_logger
from magnetar.client.aio.message import Message, OutgoingMessage
from magnetar.client.aio.policies import DeadLetterPolicy
from magnetar.proto.ids import MessageId

_log = get_logger("magnetar.client.dead_letter")

# The properties Pulsar puts on retried and dead-lettered messages.
REAL_TOPIC = "REAL_TOPIC"
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
RECONSUMETIMES = "RECONSUMETIMES"
DELAY_TIME = "DELAY_TIME"
RETRY_TOPIC_SUFFIX = "-RETRY"
DLQ_TOPIC_SUFFIX = "-DLQ"


class _Sender(Protocol):
    async def send(self, msg: OutgoingMessage) -> MessageId: ...
    async def close(self) -> None: ...


ProducerFactory = Callable[[str], Awaitable[Any]]
# subscribe_once(topic, subscription): create a durable subscription, then leave.
SubscriptionFactory = Callable[[str, str], Awaitable[None]]


def origin_id(msg: Message) -> str:
    msg_id = msg.proto_message_id()
    return f"{msg_id.ledger_id}:{msg_id.entry_id}:{msg_id.partition}:{msg_id.batch_index}"


class LastChance:
    """Messages handed out on their last delivery, by each of their ack ids;
    an ack forgets them (SEM-6.1)."""

    def __init__(self) -> None:
        self._by_id: dict[MessageId, Message] = {}

    def __len__(self) -> int:
        return len(self._by_id)

    def remember(self, msg: Message) -> None:
        for msg_id in msg.ack_ids:
            self._by_id[msg_id] = msg

    def forget(self, msg_id: MessageId) -> None:
        msg = self._by_id.pop(msg_id, None)
        if msg is not None:
            for other in msg.ack_ids:
                self._by_id.pop(other, None)

    def forget_up_to(self, msg_id: MessageId) -> None:
        for older in [k for k in self._by_id if k <= msg_id]:
            self.forget(older)

    def take(self, ids: list[MessageId]) -> tuple[list[Message], list[MessageId]]:
        """The remembered messages among `ids` (forgotten now), and the ids
        of no remembered message (a chunked one's other ids go with it)."""
        doomed: list[Message] = []
        gone: set[MessageId] = set()
        rest: list[MessageId] = []
        for msg_id in ids:
            msg = self._by_id.get(msg_id)
            if msg is not None:
                self.forget(msg_id)
                doomed.append(msg)
                gone.update(msg.ack_ids)
            elif msg_id not in gone:
                rest.append(msg_id)
        return doomed, rest

    def take_all(self) -> list[Message]:
        doomed = list({id(m): m for m in self._by_id.values()}.values())
        self._by_id.clear()
        return doomed


class DeadLetterHandler:
    def __init__(
        self,
        policy: DeadLetterPolicy,
        topic: str,
        subscription: str,
        producer_factory: ProducerFactory,
        subscription_factory: SubscriptionFactory | None = None,
    ) -> None:
        self.policy = policy
        self.topic = topic
        self.dlq_topic = policy.dlq_topic(topic, subscription)
        self.retry_topic = policy.retry_topic(topic, subscription)
        self._make_producer = producer_factory
        self._make_subscription = subscription_factory
        self._producers: dict[str, _Sender] = {}
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        self.last_chance = LastChance()
        # Ack ids of messages on their way to the dead letter topic: a copy
        # the broker redelivers meanwhile is not handed out again.
        self._dooming: set[MessageId] = set()

    @property
    def max_redeliver_count(self) -> int:
        return self.policy.max_redeliver_count

    def handed_out(self, messages: Sequence[Message]) -> None:
        """SEM-6.1 / 6.3: a message on its last delivery (the broker's
        redelivery count at the maximum) is remembered."""
        limit = self.policy.max_redeliver_count
        for msg in messages:
            if msg.redelivery_count() >= limit:
                self.last_chance.remember(msg)

    def is_dooming(self, msg: Message) -> bool:
        return bool(self._dooming) and msg.ack_ids[0] in self._dooming

    async def _producer(self, topic: str) -> _Sender:
        async with self._lock:
            if self._closed:
                raise AlreadyClosed("the consumer's dead letter handler is closed")
            producer = self._producers.get(topic)
            if producer is None:
                initial = self.policy.initial_subscription_name
                if topic == self.dlq_topic and initial and self._make_subscription is not None:
                    await self._make_subscription(topic, initial)
                producer = await self._make_producer(topic)
                self._producers[topic] = producer
            return producer

    def _copy(self, msg: Message, extra: dict[str, str], deliver_at: int | None) -> OutgoingMessage:
        properties = msg.properties()
        properties.setdefault(REAL_TOPIC, msg.topic_name())
        properties.setdefault(ORIGIN_MESSAGE_ID, origin_id(msg))
        properties.update(extra)
        return OutgoingMessage(
            msg.data(),
            properties=properties,
            partition_key=msg.partition_key() or None,
            ordering_key=msg.ordering_key_bytes(),
            event_time=msg.event_timestamp() or None,
            deliver_at=deliver_at,
        )

    async def dead_letter(self, msg: Message) -> MessageId:
        producer = await self._producer(self.dlq_topic)
        return await producer.send(self._copy(msg, {}, None))

    def dead_letter_in_background(
        self, msg: Message, then: Callable[[], object], failed: Callable[[], object]
    ) -> None:
        """Publish to the DLQ, then call `then` (which acks the original); on failure
        call `failed` (which nacks it, so it comes back and is tried again)."""

        ids = msg.ack_ids
        self._dooming.update(ids)

        async def run() -> None:
            try:
                await self.dead_letter(msg)
            except Exception as exc:
                _log.warning("dead letter publish failed", topic=self.dlq_topic, error=str(exc))
                self.last_chance.remember(msg)  # tried again at its next redelivery
                failed()
                return
            finally:
                self._dooming.difference_update(ids)
            then()

        task = asyncio.get_running_loop().create_task(run(), name="pulsar-dead-letter")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def reconsume_later(
        self, msg: Message, delay_ms: int, properties: dict[str, str] | None = None
    ) -> MessageId:
        """SEM-6.2: a copy to the retry topic after `delay_ms`, or to the DLQ past the max."""
        times = int(msg.properties().get(RECONSUMETIMES, "0")) + 1
        extra = dict(properties or {})
        extra[RECONSUMETIMES] = str(times)
        extra[DELAY_TIME] = str(max(delay_ms, 0))
        if times > self.policy.max_redeliver_count:
            producer = await self._producer(self.dlq_topic)
            return await producer.send(self._copy(msg, extra, None))
        producer = await self._producer(self.retry_topic)
        deliver_at = int(time.time() * 1000) + max(delay_ms, 0)
        return await producer.send(self._copy(msg, extra, deliver_at))

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        async with self._lock:
            producers, self._producers = list(self._producers.values()), {}
        for producer in producers:
            with contextlib.suppress(Exception):
                await producer.close()
