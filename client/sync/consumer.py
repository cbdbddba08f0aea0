"""The blocking Consumer, named as `pulsar.Consumer`.

Receiving takes messages from a thread-side buffer the loop fills an entry at
a time, so `receive` and `batch_receive` cost no loop round trip, as the
official client's do. Deliveries (permits, SEM-2.3; ack timeouts, SEM-3.6)
and individual acks (SEM-3.4) are handed to the loop in bulk through
AppEvents; everything else runs on the loop in submission order.
"""

from __future__ import annotations

import time
from typing import Any

from magnetar.client.aio import message as _aio_message
from magnetar.client.aio.consumer import consumer as _aio_consumer, multi_topic as _aio_multi
from magnetar.client.aio.errors import AlreadyClosed, InvalidConfiguration, Timeout
from magnetar.client.sync.accessors import ConsumerAccessors
from magnetar.client.sync.loop import AppEvents, ClientLoop, ThreadQueue
from magnetar.client.sync.messages import Message, MessageId, message_class, seek_target
from magnetar.proto import ids as _ids

_data_of = _aio_message.Message.data
# How long a receive waits for the loop to take its deliveries (a hint: the
# loop takes them later anyway).
_HAND_OVER_WAIT = 0.05
AckTarget = _aio_message.Message | _ids.MessageId


class Consumer(ConsumerAccessors):
    """A consumer; methods named as in `pulsar.Consumer`, plus our additions."""

    def __init__(
        self,
        client: ClientLoop,
        consumer: _aio_consumer.Consumer | _aio_multi.MultiTopicsConsumer,
        schema: Any,
    ) -> None:
        self._client = client
        self._consumer = consumer
        self._schema = schema
        self._message_class = message_class(schema)
        # Only a multi-topic consumer routes ack targets (and refuses an id it cannot route).
        self._router = consumer if isinstance(consumer, _aio_multi.MultiTopicsConsumer) else None
        self._receipts = consumer.conf.ack_receipt_enabled
        self._zero_queue = consumer.conf.receiver_queue_size == 0
        # SEM-2.3: the loop sends FLOW once half the receiver queue is freed;
        # deliveries are handed over at once when they may reach that.
        self._refill_at = max(consumer.conf.receiver_queue_size // 2, 1)
        self._since_refill = 0
        # Filled by the loop thread (see install) unless a listener consumes.
        self._buffer: ThreadQueue[Message] | None = None
        self._events: AppEvents[_aio_message.Message, AckTarget] = AppEvents(
            client.submitter, consumer.messages_delivered, consumer.ack_many
        )

    def install(self, buffered: bool) -> None:
        """On the loop thread: the core builds this module's messages and, unless a
        listener consumes, puts them in a thread-side buffer, so receive() takes
        them without a loop round trip, as the official client's does."""
        core = self._consumer
        cls = self._message_class
        core.set_message_class(cls)
        if not buffered:
            return
        buffer: ThreadQueue[Message] = ThreadQueue()

        def sink(_core: object, messages: list[_aio_message.Message]) -> None:
            # Decoded before set_message_class (or by a core of its own): converted.
            if messages[0].__class__ is not cls:
                messages = [cls.of(m) for m in messages]
            buffer.put_many(messages)  # type: ignore[arg-type]

        queued = core.queue.clear()
        if queued:
            sink(core, queued)
        core.set_message_sink(sink)
        core.on_queue_cleared = buffer.clear
        core.on_closed = lambda: self._closed_buffer(buffer)
        self._buffer = buffer

    def _closed_buffer(self, buffer: ThreadQueue[Message]) -> None:
        """Closed or unsubscribed by the application: receive raises at once, as
        the official client's does; what was prefetched goes to the next
        consumer (the broker redelivers unacked messages)."""
        buffer.clear()
        topic = self._consumer.topic()
        buffer.close(lambda: AlreadyClosed(f"consumer on {topic} is closed"))

    def _receiving(self) -> ThreadQueue[Message]:
        self._check_open()
        buffer = self._buffer
        if buffer is None:
            raise InvalidConfiguration(
                "the consumer has a message listener: receive is not allowed"
            )
        if self._zero_queue and not len(buffer):
            self._client.submit(self._consumer.request_one)
        return buffer

    def receive(self, timeout_millis: int | None = None) -> Message:
        msg = self._receiving().get(None if timeout_millis is None else timeout_millis / 1000)
        if msg is None:
            raise Timeout(f"no message within {timeout_millis} ms")
        self._events.delivered(msg)
        self._since_refill += 1
        if self._since_refill >= self._refill_at:
            self._refill()
        return msg

    def batch_receive(self) -> list[Message]:
        """Messages until a limit of the batch receive policy (SEM-1) is hit: as
        many as are buffered at once, then waiting for more until the timeout."""
        buffer = self._receiving()
        policy = self._consumer.conf.batch_receive_policy
        max_count, max_bytes = policy.max_num_message, policy.max_num_bytes
        deadline = time.monotonic() + policy.timeout_ms / 1000 if policy.timeout_ms > 0 else None
        taken: list[Message] = []
        size = 0
        while True:
            remaining = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            if not buffer.wait(remaining):
                break
            more = buffer.take(max_count - len(taken) if max_count > 0 else 0)
            more_size = sum(map(len, map(_data_of, more)))
            if 0 < max_bytes <= size + more_size:
                # The byte limit is reached inside `more`: keep what fits (never
                # more than max_num_bytes, as the official client and the async
                # core; one message at least, however large).
                cut = 0
                while cut < len(more):
                    length = len(more[cut].data())
                    if size + length > max_bytes and (taken or cut):
                        break
                    size += length
                    cut += 1
                buffer.give_back(more[cut:])
                taken += more[:cut]
                break
            taken += more
            size += more_size
            if 0 < max_count <= len(taken):
                break
        if taken:
            self._events.delivered_many(taken)  # type: ignore[arg-type]
            self._since_refill += len(taken)
            if self._since_refill >= self._refill_at:
                self._refill()
        return taken

    def _refill(self) -> None:
        self._since_refill = 0
        if not self._zero_queue:
            self._events.hand_over(_HAND_OVER_WAIT)

    def _check_open(self) -> None:
        # Events for a stopped loop would be lost (and its submit refuses them).
        if self._client.closed:
            raise AlreadyClosed("the client is closed")

    def _target(self, message: Message | MessageId) -> AckTarget:
        self._check_open()
        target = message if isinstance(message, Message) else message.inner
        router = self._router
        if router is not None:
            if isinstance(message, MessageId) and message.topic is not None:
                router.note_topic(message.inner, message.topic)
            router.check_target(target)
        return target

    def acknowledge(self, message: Message | MessageId) -> None:
        """SEM-3.4: grouped and sent by the loop; waits for the broker with ack receipts."""
        target = self._target(message)
        if self._receipts:
            self._client.run(self._consumer.acknowledge(target))
        else:
            self._events.acked(target)

    def acknowledge_cumulative(self, message: Message | MessageId) -> None:
        self._consumer.check_cumulative()
        target = self._target(message)
        if self._receipts:
            self._client.run(self._consumer.acknowledge_cumulative(target))
        else:
            self._client.submit(self._consumer.ack_cumulative_nowait, target)

    def negative_acknowledge(self, message: Message | MessageId) -> None:
        self._client.submit(self._consumer.negative_acknowledge, self._target(message))

    def redeliver_unacknowledged_messages(self) -> None:
        self._client.run_ordered(self._redeliver_all)

    async def _redeliver_all(self) -> None:
        self._consumer.redeliver_unacknowledged_messages()

    def pause_message_listener(self) -> None:
        self._client.submit(self._consumer.pause_message_listener)

    def resume_message_listener(self) -> None:
        self._client.submit(self._consumer.resume_message_listener)

    def seek(self, messageid: MessageId | int) -> None:
        """To a message id, or to a publish time in ms since the epoch."""
        target = seek_target(messageid)
        self._client.run_ordered(lambda: self._consumer.seek(target))

    def get_last_message_id(self) -> MessageId:
        return MessageId.wrap(self._client.run(self._consumer.get_last_message_id()))

    def reconsume_later(
        self, message: Message, delay_millis: int, properties: dict[str, str] | None = None
    ) -> None:
        """SEM-6.2 (not in the official Python client): retry `message` after a delay."""
        self._client.run_ordered(
            lambda: self._consumer.reconsume_later(message, delay_millis, properties)
        )

    def unsubscribe(self) -> None:
        self._client.run_ordered(self._consumer.unsubscribe)

    def close(self) -> None:
        if not self._client.closed:
            self._client.run_ordered(self._consumer.close)
