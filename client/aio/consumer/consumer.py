"""Consumer: one topic or one partition, with its trackers.

Incoming MESSAGE frames are split (batches), decompressed, reassembled
(chunks) and queued; permits follow SEM-2. The acknowledgement side (ack
grouping SEM-3.4, ack timeout SEM-3.6, nacks SEM-3.5, redelivery requests
SEM-3.7) lives in ConsumerAcks; one Ticker task drives its timers and the
stats log. Retry and dead letter topics are handled by a DeadLetterHandler
(SEM-6).

Public surface for composite consumers (the multi-topic consumer reuses this
class per topic or partition):

- `set_message_sink(sink)`: messages go to `sink(consumer, messages)` (a list
  per received entry) instead of this consumer's own IncomingQueue; the owner
  then calls `messages_delivered(messages)` when it hands them to the
  application (this frees their permits and starts their ack timeouts).
- `acknowledge`, `acknowledge_cumulative`, `negative_acknowledge`,
  `redeliver_unacknowledged_messages`, `redeliver(ids)`: per-message hooks
  the owner routes by `message.topic_name()`; `ack_many` for many at once.
- `receive`, `batch_receive`, `seek`, `get_last_message_id`, `unsubscribe`,
  `close` as in the official client.
"""

from __future__ import annotations

import asyncio
import functools
import uuid as _uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from magnetar.client.aio.config import ConsumerConfiguration
from magnetar.client.aio.consumer.acks import SHARED_TYPES, AckTarget, ConsumerAcks
from magnetar.client.aio.consumer.chunking import ChunkAssembler
from magnetar.client.aio.consumer.dead_letter import DeadLetterHandler
from magnetar.client.aio.consumer.incoming import MessageDecoder
from magnetar.client.aio.consumer.incoming_queue import IncomingQueue
from magnetar.client.aio.consumer.listener import ListenerRunner
from magnetar.client.aio.consumer.stats import ConsumerStats
from magnetar.client.aio.crypto import ConsumerCrypto
from magnetar.client.aio.enums import ConsumerCryptoFailureAction, ConsumerType
from magnetar.client.aio.errors import (
    AlreadyClosed,
    ConnectError,
    CumulativeAcknowledgementNotAllowedError,
    InvalidConfiguration,
    PulsarException,
)
from magnetar.client.aio.message import Message
from magnetar.client.aio.net import commands
from magnetar.client.aio.net.connection import ClientConnection
from magnetar.client.aio.net.context import ClientContext
from magnetar.client.aio.net.handler import ConnectionHandler, State
from magnetar.client.aio.ticker import Job, Ticker
from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.frames import Frame
from magnetar.proto.ids import MessageId, read_after
from magnetar.proto.naming import TopicName

_ACK = pb.CommandAck

MessageSink = Callable[["Consumer", list[Message]], None]


class Consumer(ConnectionHandler):
    def __init__(
        self,
        context: ClientContext,
        topic: TopicName,
        subscription: str,
        conf: ConsumerConfiguration,
        *,
        dead_letter: DeadLetterHandler | None = None,
    ) -> None:
        super().__init__(context, topic)
        self.conf = conf
        self.subscription = subscription
        self.consumer_id = next(context.consumer_ids)
        self.name = conf.consumer_name or _uuid.uuid4().hex[:10]
        self.partition = topic.partition_index
        # Readers: where (re)subscribing starts; a reader moves it along.
        self.start_message_id = conf.start_message_id
        # After seek(message id): what comes at or before it (before it, when
        # start_message_id_inclusive) is dropped, as the official client does.
        self._seek_floor: MessageId | None = None
        self._log = self._log.bind(subscription=subscription, consumer=self.name)
        self.queue = IncomingQueue()
        self._sink: MessageSink | None = None
        # A sink's owner hears when queued messages stop being valid, and on close.
        self.on_queue_cleared: Callable[[], None] | None = None
        self.on_closed: Callable[[], None] | None = None
        self._freed_permits = 0
        self._decoder = MessageDecoder(
            str(topic),
            self.partition,
            ChunkAssembler(
                conf.max_pending_chunked_message,
                conf.expire_time_of_incomplete_chunked_message_ms / 1000.0,
            ),
            consume_encrypted=conf.crypto_failure_action == ConsumerCryptoFailureAction.CONSUME,
            crypto=ConsumerCrypto(conf.crypto_key_reader) if conf.crypto_key_reader else None,
        )
        self.stats = ConsumerStats()
        self.acks = ConsumerAcks(self, conf, self.stats, self._log)
        self._dead_letter_handler: DeadLetterHandler | None = None
        self.dead_letter = dead_letter
        self.retry_consumer: Consumer | None = None
        self.is_active: bool | None = None
        self._ticker = Ticker(f"pulsar-consumer-timers-{topic}")
        for job in self.acks.jobs(self._ticker.poke):
            self._ticker.add(job)
        interval = conf.stats_interval_seconds
        if interval > 0:
            self._ticker.add(Job("stats", lambda: interval, self._log_stats))
        self._listener: ListenerRunner | None = None
        if conf.message_listener is not None:
            self._listener = ListenerRunner(self, conf.message_listener, self._next_for_listener)

    @property
    def dead_letter(self) -> DeadLetterHandler | None:
        return self._dead_letter_handler

    @dead_letter.setter
    def dead_letter(self, handler: DeadLetterHandler | None) -> None:
        self._dead_letter_handler = handler
        self.acks.last_chance = handler.last_chance if handler is not None else None

    def topic(self) -> str:
        return str(self.topic_name)

    def subscription_name(self) -> str:
        return self.subscription

    def consumer_name(self) -> str:
        return self.name

    def _log_stats(self) -> None:
        self._log.info("consumer stats", **self.stats.snapshot(len(self.queue)))

    async def start(self) -> None:
        await super().start()
        self._ticker.start()
        if self._listener is not None:
            self._listener.start()

    # -- attach -----------------------------------------------------------

    async def attach(self, cnx: ClientConnection) -> None:
        request_id = cnx.new_request_id()
        conf = self.conf
        key_shared = conf.key_shared_policy
        command = commands.subscribe(
            str(self.topic_name),
            self.subscription,
            self.consumer_id,
            request_id,
            sub_type=int(conf.consumer_type),
            consumer_name=self.name,
            durable=conf.durable,
            initial_position=int(conf.initial_position),
            priority_level=conf.priority_level,
            read_compacted=conf.is_read_compacted,
            replicate_subscription_state=conf.replicate_subscription_state_enabled,
            start_message_id=self.start_message_id,
            properties=conf.properties,
            key_shared_meta=(
                key_shared.to_proto()
                if conf.consumer_type == ConsumerType.KeyShared and key_shared is not None
                else None
            ),
            schema=conf.schema,
        )
        # Register first: the broker may deliver right after its SUCCESS.
        cnx.register_consumer(self.consumer_id, self)
        try:
            await cnx.request(command, request_id)
        except BaseException:
            cnx.remove_consumer(self.consumer_id, self)
            raise
        if self.state in (State.CLOSING, State.CLOSED):
            raise AlreadyClosed(f"consumer on {self.topic_name} closed while subscribing")
        # Whatever was queued and not received will be redelivered: drop it.
        self._clear_queue()
        self._decoder.clear()
        self.acks.forget_delivered()
        self._freed_permits = 0
        self.cnx = cnx
        self.state = State.READY
        if conf.receiver_queue_size > 0:
            self._flow(cnx, conf.receiver_queue_size)

    def _flow(self, cnx: ClientConnection, permits: int) -> None:
        cnx.send_command(commands.flow(self.consumer_id, permits))

    def on_disconnected(self) -> None:
        self.acks.on_disconnected()

    def handle_close_consumer(self) -> None:
        # The broker will deliver what is queued again after we resubscribe
        # (and after a seek, what is queued is from the old position): no
        # receive may hand it out meanwhile.
        self._clear_queue()
        cnx = self.cnx
        if cnx is not None:
            self.connection_closed(cnx)

    def handle_active_consumer_change(self, is_active: bool) -> None:
        self.is_active = is_active
        self._log.info("active consumer change", active=is_active)
        listener = self.conf.active_consumer_listener
        if listener is not None:
            try:
                listener(self, is_active)
            except Exception as exc:
                self._log.exception("active consumer listener raised", error=str(exc))

    def on_fatal(self, error: PulsarException) -> None:
        self.queue.close(lambda: error)

    # -- incoming ---------------------------------------------------------

    def handle_bad_checksum(self, frame: Frame) -> None:
        data = frame.command.message.message_id
        self.acks.send_validation_ack(data.ledgerId, data.entryId, _ACK.ChecksumMismatch)
        self._free_permits(1)

    def handle_message(self, frame: Frame) -> None:
        decoder = self._decoder
        decoded = decoder.decode(frame)
        if decoder.chunks.dropped:
            self._chunks_dropped()
        if decoded.error is not None:
            data = frame.command.message.message_id
            self._log.warning("undecodable message", error=decoded.error)
            self.acks.send_validation_ack(data.ledgerId, data.entryId, _ACK.DecompressionError)
        if decoded.undecryptable:
            self._undecryptable(decoded.entry)
        if decoded.skipped:
            self._free_permits(decoded.skipped)
        messages = decoded.messages
        if self._seek_floor is not None and messages:
            messages = self._past_seek_floor(messages, decoded.batch_indexes)
        if not messages:
            return
        # Everything an entry's messages share is checked once for the entry.
        if self.acks.grouping.is_entry_pending(decoded.entry):
            self._free_permits(len(messages))  # already acked, redelivered before the ack went out
            return
        if decoded.batch_indexes:
            self.acks.batch_unacked[decoded.entry] = decoded.batch_indexes
        dead_letter = self.dead_letter
        if dead_letter is not None and dead_letter.is_dooming(messages[0]):
            self._free_permits(len(messages))  # on its way to the dead letter topic
            return
        self.stats.received += len(messages)
        self.stats.received_bytes += decoded.size
        self._hand_out(messages)

    def _past_seek_floor(self, messages: list[Message], batch_indexes: set[int]) -> list[Message]:
        floor = self._seek_floor
        assert floor is not None
        inclusive = self.conf.start_message_id_inclusive
        kept = [m for m in messages if read_after(m.proto_message_id(), floor, inclusive)]
        if len(kept) < len(messages):
            self._free_permits(len(messages) - len(kept))
            if batch_indexes:
                batch_indexes.intersection_update(m.proto_message_id().batch_index for m in kept)
        return kept

    def _hand_out(self, messages: list[Message]) -> None:
        sink = self._sink
        if sink is not None:
            sink(self, messages)
        else:
            self.queue.put_many(messages)

    def _chunks_dropped(self) -> None:
        for reason, ids in self._decoder.chunks.take_dropped():
            self._log.warning("chunked message dropped", reason=reason)
            if self.conf.auto_ack_oldest_chunked_message_on_queue_full:
                for msg_id in ids:
                    self.acks.grouping.add_individual(msg_id.entry_key())
                self.flush_acks()

    def _undecryptable(self, entry: tuple[int, int]) -> None:
        """An encrypted message we cannot decrypt: crypto_failure_action decides."""
        if self.conf.crypto_failure_action == ConsumerCryptoFailureAction.DISCARD:
            self._log.warning("encrypted message discarded", entry=entry)
            self.acks.grouping.add_individual(entry)
            self.flush_acks()
        else:  # FAIL: not delivered, left unacked for redelivery
            self._log.warning("encrypted message not delivered (crypto FAIL)", entry=entry)

    def _free_permits(self, count: int) -> None:
        """SEM-2.3: FLOW the freed permits once they reach half the receiver queue."""
        size = self.conf.receiver_queue_size
        if size <= 0:
            return
        self._freed_permits += count
        if self._freed_permits >= max(size // 2, 1) and self.cnx is not None:
            permits, self._freed_permits = self._freed_permits, 0
            self._flow(self.cnx, permits)

    # -- the application's side -------------------------------------------

    def set_message_sink(self, sink: MessageSink | None) -> None:
        """Route incoming messages to `sink` (a composite consumer's shared queue)."""
        self._sink = sink

    def set_message_class(self, cls: type[Message]) -> None:
        """Build received messages as `cls` (the blocking facade's Message)."""
        self._decoder.message_class = cls
        if self.retry_consumer is not None:
            self.retry_consumer.set_message_class(cls)

    def attach_retry_consumer(self, retry: Consumer) -> None:
        """SEM-6.2: the retry topic's consumer feeds this consumer's messages."""
        self.retry_consumer = retry
        retry.set_message_sink(lambda _owner, messages: self._hand_out(messages))

    def message_delivered(self, msg: Message) -> None:
        """`msg` reached the application: free its permit, start its ack timeout."""
        self.messages_delivered((msg,))

    def messages_delivered(self, messages: Sequence[Message]) -> None:
        """message_delivered for several at once (one loop call from another thread)."""
        retry = self.retry_consumer
        if retry is not None:
            theirs = [m for m in messages if m.topic_name() == retry.topic()]
            if theirs:
                retry.messages_delivered(theirs)
                messages = [m for m in messages if m.topic_name() != retry.topic()]
        if messages:
            self._free_permits(len(messages))
            self.acks.delivered(messages)
            if self.dead_letter is not None:
                self.dead_letter.handed_out(messages)

    def _check_receive(self) -> None:
        if self._listener is not None:
            raise InvalidConfiguration(
                "the consumer has a message listener: receive is not allowed"
            )
        self._check_open()

    def _check_open(self) -> None:
        if self.state in (State.CLOSING, State.CLOSED, State.FAILED):
            raise self.failure or AlreadyClosed(f"consumer on {self.topic_name} is closed")

    def _clear_queue(self) -> int:
        cleared = len(self.queue.clear())
        if self.on_queue_cleared is not None:
            self.on_queue_cleared()
        return cleared

    def request_one(self) -> None:
        """SEM-2.4: a zero-queue consumer's one permit for one receive."""
        if self.cnx is not None:
            self._flow(self.cnx, 1)

    def _zero_queue_permit(self) -> None:
        if self.conf.receiver_queue_size == 0 and not len(self.queue) and self.cnx is not None:
            self._flow(self.cnx, 1)  # SEM-2.4: zero-queue consumer

    async def _next_for_listener(self) -> Message:
        self._zero_queue_permit()
        msg = await self.queue.get()
        self.message_delivered(msg)
        return msg

    async def receive(self, timeout_millis: int | None = None) -> Message:
        """The next message; raises Timeout after `timeout_millis` without one."""
        self._check_receive()
        msg = self.queue.get_nowait()  # queued already: no coroutine to wait in
        if msg is None:
            self._zero_queue_permit()
            msg = await self.queue.get(timeout_millis)
        self.messages_delivered((msg,))
        return msg

    async def batch_receive(self) -> list[Message]:
        """Messages until a limit of the batch receive policy is hit (SEM-1)."""
        self._check_receive()
        self._zero_queue_permit()
        messages = await self.queue.get_batch(self.conf.batch_receive_policy)
        self.messages_delivered(messages)
        return messages

    def pause_message_listener(self) -> None:
        if self._listener is not None:
            self._listener.pause()

    def resume_message_listener(self) -> None:
        if self._listener is not None:
            self._listener.resume()

    # -- acknowledgement (routing; the work is in ConsumerAcks) -----------

    def _owner_of(self, target: Message | MessageId) -> Consumer:
        retry = self.retry_consumer
        if (
            retry is not None
            and isinstance(target, Message)
            and target.topic_name() == retry.topic()
        ):
            return retry
        return self

    def check_target(self, target: Message | MessageId) -> None:
        """Any message or id of this topic can be acked (a multi-topic consumer
        refuses ids it cannot route)."""

    def ack_nowait(self, target: Message | MessageId) -> asyncio.Future[None] | None:
        """Record an ack; a future for the broker's answer when ack receipts are on."""
        owner = self._owner_of(target)
        if owner is not self:
            return owner.ack_nowait(target)
        if not self.conf.ack_receipt_enabled:
            self.acks.ack_many((target,))  # nothing to wait for: the cheap path
            return None
        ids = target.ack_ids if isinstance(target, Message) else (target,)
        return self.acks.ack_ids(ids)

    def ack_many(self, targets: Sequence[AckTarget]) -> None:
        """Acknowledge several messages or ids at once (no receipts awaited)."""
        if self.retry_consumer is not None or self.conf.ack_receipt_enabled:
            for target in targets:
                self.ack_nowait(target)
            return
        self.acks.ack_many(targets)

    async def acknowledge(self, target: Message | MessageId) -> None:
        """Acknowledge one message (SEM-3.1); waits for ACK_RESPONSE with ack receipts."""
        waiter = self.ack_nowait(target)
        if waiter is not None:
            await waiter

    def check_cumulative(self) -> None:
        if self.conf.consumer_type in SHARED_TYPES:
            raise CumulativeAcknowledgementNotAllowedError(
                "cumulative ack is not allowed on Shared and Key_Shared subscriptions"
            )

    def ack_cumulative_nowait(self, target: Message | MessageId) -> asyncio.Future[None] | None:
        self.check_cumulative()
        msg_id = target.ack_ids[-1] if isinstance(target, Message) else target
        return self.acks.ack_cumulative(msg_id)

    async def acknowledge_cumulative(self, target: Message | MessageId) -> None:
        """SEM-3.2: everything up to `target`; refused on Shared and Key_Shared."""
        waiter = self.ack_cumulative_nowait(target)
        if waiter is not None:
            await waiter

    def flush_acks(self) -> None:
        self.acks.flush()

    # -- negative acks and redelivery -------------------------------------

    def negative_acknowledge(self, target: Message | MessageId) -> None:
        """SEM-3.5: redeliver after the nack delay; no ack-timeout redelivery on top."""
        owner = self._owner_of(target)
        if owner is not self:
            owner.negative_acknowledge(target)
            return
        self.acks.negative(target.ack_ids if isinstance(target, Message) else (target,))

    def redeliver(self, ids: Iterable[MessageId]) -> None:
        """SEM-3.7: Shared / Key_Shared name the entries; the others ask for all."""
        if self.conf.consumer_type not in SHARED_TYPES:
            self.redeliver_unacknowledged_messages()
            return
        dead_letter = self.dead_letter
        if dead_letter is not None and len(dead_letter.last_chance):
            doomed, rest = dead_letter.last_chance.take(list(ids))
            self._dead_letter(doomed)
            ids = rest
        self.acks.request_redelivery(ids)

    def _dead_letter(self, doomed: list[Message]) -> None:
        """SEM-6.1: these would come a time too many: to the dead letter topic,
        then acked here (nacked again when the publish fails)."""
        dead_letter = self.dead_letter
        assert dead_letter is not None
        for msg in doomed:
            dead_letter.dead_letter_in_background(
                msg,
                # Through the owner: a retry topic's message is its consumer's.
                functools.partial(self.ack_nowait, msg),
                functools.partial(self.negative_acknowledge, msg),
            )

    def redeliver_unacknowledged_messages(self) -> None:
        """Everything delivered and unacked comes again, but for messages on
        their last delivery, which go to the dead letter topic (SEM-6.1); the
        incoming queue is emptied."""
        if self.dead_letter is not None:
            self._dead_letter(self.dead_letter.last_chance.take_all())
        cleared = self._clear_queue()
        self._decoder.clear()
        self.acks.forget_delivered()
        self.acks.nacks.clear()
        cnx = self.cnx
        if cnx is None:
            return
        self.stats.redelivery_requests += 1
        cnx.send_command(commands.redeliver_unacknowledged(self.consumer_id))
        if cleared:
            self._free_permits(cleared)
        if self.retry_consumer is not None:
            self.retry_consumer.redeliver_unacknowledged_messages()

    # -- retry ------------------------------------------------------------

    async def reconsume_later(
        self, msg: Message, delay_ms: int, properties: dict[str, str] | None = None
    ) -> None:
        """SEM-6.2: publish a copy to the retry topic (or the DLQ past the max), ack this one."""
        if not self.conf.enable_retry or self.dead_letter is None:
            raise InvalidConfiguration("reconsume_later needs enable_retry=True")
        await self.dead_letter.reconsume_later(msg, delay_ms, properties)
        await self.acknowledge(msg)

    # -- requests to the broker -------------------------------------------

    async def _connected(self) -> ClientConnection:
        self._check_open()
        try:
            return await self.wait_connected()
        except ConnectError:
            self._check_open()  # closed meanwhile: AlreadyClosed says so
            raise

    async def seek(self, target: MessageId | int) -> None:
        """Move the subscription to a message id or a publish time in ms (WIRE 12)."""
        cnx = await self._connected()
        request_id = cnx.new_request_id()
        command = commands.seek(self.consumer_id, request_id, target)
        self.flush_acks()
        # Nothing queued from the old position is wanted. A broker that closes
        # us on seek (Pulsar, ours) has us resubscribe, which clears again what
        # came in flight; one that does not sends the new position's messages
        # before or after its answer, so nothing is cleared after the request.
        self._clear_queue()
        self.acks.forget_delivered()
        self.acks.nacks.clear()
        self._seek_floor = (
            target if isinstance(target, MessageId) and target.ledger_id >= 0 else None
        )
        await cnx.request(command, request_id)

    async def get_last_message_id(self) -> MessageId:
        cnx = await self._connected()
        request_id = cnx.new_request_id()
        frame = await cnx.request(
            commands.get_last_message_id(self.consumer_id, request_id), request_id
        )
        answer = frame.command.getLastMessageIdResponse
        return MessageId.from_proto(answer.last_message_id, self.partition)

    async def unsubscribe(self) -> None:
        cnx = await self._connected()
        request_id = cnx.new_request_id()
        await cnx.request(commands.unsubscribe(self.consumer_id, request_id), request_id)
        await self.close()

    def stats_snapshot(self) -> dict[str, Any]:
        return self.stats.snapshot(len(self.queue))

    async def close(self) -> None:
        """Flush acks, stop the timers and listener, leave the subscription (idempotent)."""
        if self.state in (State.CLOSING, State.CLOSED):
            return
        self.flush_acks()
        self.state = State.CLOSING
        if self._listener is not None:
            await self._listener.stop()
        await self._ticker.stop()
        await self.acks.close()
        if self.retry_consumer is not None:
            await self.retry_consumer.close()
        if self.dead_letter is not None:
            await self.dead_letter.close()
        await self.stop_reconnecting()
        cnx, self.cnx = self.cnx, None
        if cnx is not None and not cnx.is_closed:
            cnx.remove_consumer(self.consumer_id, self)
            request_id = cnx.new_request_id()
            try:
                await cnx.request(commands.close_consumer(self.consumer_id, request_id), request_id)
            except PulsarException as exc:
                self._log.debug("close consumer not confirmed", error=str(exc))
        self.state = State.CLOSED
        self.queue.close(lambda: AlreadyClosed(f"consumer on {self.topic_name} is closed"))
        if self.on_closed is not None:
            self.on_closed()
        self.context.endpoints.discard(self)
