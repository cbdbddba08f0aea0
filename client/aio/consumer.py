"""Consumer (basic): subscribe, FLOW permits, receive, acknowledge.

Enough for single-topic use: batches are split, payloads decompressed and
chunked messages reassembled. Permits follow SEM-2: receiver_queue_size
permits after SUBSCRIBE, and a FLOW for the freed ones each time half the
queue has been handed to the application. Acks go out at once (no grouping
yet); a batch entry is acked when all its messages are.
"""

from __future__ import annotations

import asyncio
import uuid as _uuid
from collections import deque

from magnetar.client.aio.chunking import ChunkAssembler
from magnetar.client.aio.compression import decompress
from magnetar.client.aio.config import ConsumerConfiguration
from magnetar.client.aio.connection import ClientConnection
from magnetar.client.aio.context import ClientContext
from magnetar.client.aio.errors import AlreadyClosed, PulsarException, Timeout
from magnetar.client.aio.handler import ConnectionHandler, State
from magnetar.client.aio.message import Message
from magnetar.proto import messages as batches
from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.errors import ProtocolError
from magnetar.proto.frames import Frame
from magnetar.proto.ids import MessageId, to_signed64, to_unsigned64
from magnetar.proto.naming import TopicName

_ACK = pb.CommandAck


class Consumer(ConnectionHandler):
    def __init__(
        self,
        context: ClientContext,
        topic: TopicName,
        subscription: str,
        conf: ConsumerConfiguration,
    ) -> None:
        super().__init__(context, topic)
        self.conf = conf
        self.subscription = subscription
        self.consumer_id = next(context.consumer_ids)
        self.name = conf.consumer_name or _uuid.uuid4().hex[:10]
        self.partition = topic.partition_index
        self._loop = asyncio.get_running_loop()
        self._queue: deque[Message] = deque()
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._freed_permits = 0
        self._batch_unacked: dict[tuple[int, int], set[int]] = {}
        self._chunks = ChunkAssembler(conf.max_pending_chunked_message)

    def topic(self) -> str:
        return str(self.topic_name)

    def subscription_name(self) -> str:
        return self.subscription

    def consumer_name(self) -> str:
        return self.name

    # -- attach -----------------------------------------------------------

    async def attach(self, cnx: ClientConnection) -> None:
        request_id = cnx.new_request_id()
        command = pb.CommandSubscribe(
            topic=str(self.topic_name),
            subscription=self.subscription,
            subType=int(self.conf.consumer_type),  # type: ignore[arg-type]
            consumer_id=self.consumer_id,
            request_id=request_id,
            consumer_name=self.name,
            durable=True,
            initialPosition=int(self.conf.initial_position),  # type: ignore[arg-type]
        )
        if self.conf.properties:
            command.metadata.extend(
                pb.KeyValue(key=k, value=v) for k, v in sorted(self.conf.properties.items())
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
        self._queue.clear()
        self._batch_unacked.clear()
        self._chunks.clear()
        self._freed_permits = 0
        self.cnx = cnx
        self.state = State.READY
        if self.conf.receiver_queue_size > 0:
            self._flow(cnx, self.conf.receiver_queue_size)

    def _flow(self, cnx: ClientConnection, permits: int) -> None:
        cnx.send_command(pb.CommandFlow(consumer_id=self.consumer_id, messagePermits=permits))

    def handle_close_consumer(self) -> None:
        cnx = self.cnx
        if cnx is not None:
            self.connection_closed(cnx)

    def handle_active_consumer_change(self, is_active: bool) -> None:
        self._log.debug("active consumer change", active=is_active)

    def on_fatal(self, error: PulsarException) -> None:
        self._wake_all()

    # -- incoming ---------------------------------------------------------

    def handle_bad_checksum(self, frame: Frame) -> None:
        data = frame.command.message.message_id
        self._send_ack([(data.ledgerId, data.entryId)], validation_error=_ACK.ChecksumMismatch)
        self._free_permits(1)

    def handle_message(self, frame: Frame) -> None:
        command = frame.command.message
        payload = frame.payload
        if payload is None:
            return
        ledger = to_signed64(command.message_id.ledgerId)
        entry = to_signed64(command.message_id.entryId)
        entry_id = MessageId(ledger, entry, self.partition)
        try:
            meta = payload.metadata
            body = payload.payload
            ack_ids: tuple[MessageId, ...] = (entry_id,)
            if batches.is_chunk(meta):
                assembled = self._chunks.add(meta, body, entry_id)
                self._ack_dropped_chunks()
                if assembled is None:
                    self._free_permits(1)
                    return
                body = assembled.payload
                ack_ids = assembled.chunk_ids
            if meta.compression:
                body = decompress(meta.compression, body, meta.uncompressed_size)
            if batches.is_batch(meta):
                self._enqueue_batch(command, meta, body, ledger, entry)
            else:
                self._enqueue(self._single(command, meta, body, entry_id, ack_ids))
        except (PulsarException, ProtocolError) as exc:
            self._log.warning("undecodable message", error=str(exc), ledger=ledger, entry=entry)
            self._send_ack([(ledger, entry)], validation_error=_ACK.DecompressionError)
            self._free_permits(1)

    def _single(
        self,
        command: pb.CommandMessage,
        meta: pb.MessageMetadata,
        body: bytes,
        msg_id: MessageId,
        ack_ids: tuple[MessageId, ...],
    ) -> Message:
        return Message(
            body,
            msg_id,
            str(self.topic_name),
            batches.properties(meta),
            batches.partition_key(meta),
            batches.ordering_key(meta),
            meta.publish_time,
            meta.event_time,
            meta.producer_name,
            command.redelivery_count,
            meta.null_value,
            meta.schema_version,
            ack_ids,
        )

    def _enqueue_batch(
        self,
        command: pb.CommandMessage,
        meta: pb.MessageMetadata,
        body: bytes,
        ledger: int,
        entry: int,
    ) -> None:
        count = meta.num_messages_in_batch
        items = batches.split_batch(body, count)
        # ack_set bits mark the indexes still unacked (WIRE 14).
        ack_set = list(command.ack_set)
        unacked: set[int] = set()
        skipped = 0
        for index, (single, data) in enumerate(items):
            if ack_set and not (ack_set[index // 64] >> (index % 64)) & 1:
                skipped += 1
                continue
            if single.compacted_out:
                skipped += 1
                continue
            unacked.add(index)
            msg_id = MessageId(ledger, entry, self.partition, index, count)
            self._enqueue(
                Message(
                    data,
                    msg_id,
                    str(self.topic_name),
                    batches.properties(single),
                    batches.partition_key(single),
                    batches.ordering_key(single),
                    meta.publish_time,
                    single.event_time,
                    meta.producer_name,
                    command.redelivery_count,
                    single.null_value,
                    meta.schema_version,
                    (msg_id,),
                )
            )
        if unacked:
            self._batch_unacked[(ledger, entry)] = unacked
        if skipped:
            self._free_permits(skipped)

    def _enqueue(self, msg: Message) -> None:
        self._queue.append(msg)
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                break

    def _wake_all(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)

    def _free_permits(self, count: int) -> None:
        """SEM-2.3: FLOW the freed permits once they reach half the receiver queue."""
        size = self.conf.receiver_queue_size
        if size <= 0:
            return
        self._freed_permits += count
        if self._freed_permits >= max(size // 2, 1) and self.cnx is not None:
            permits, self._freed_permits = self._freed_permits, 0
            self._flow(self.cnx, permits)

    def _ack_dropped_chunks(self) -> None:
        for reason, ids in self._chunks.take_dropped():
            self._log.warning("chunked message dropped", reason=reason)
            if self.conf.auto_ack_oldest_chunked_message_on_queue_full:
                self._send_ack([(m.ledger_id, m.entry_id) for m in ids])

    # -- the application's side -------------------------------------------

    async def receive(self, timeout_millis: int | None = None) -> Message:
        """The next message; raises Timeout after `timeout_millis` without one."""
        if self.conf.receiver_queue_size == 0 and not self._queue and self.cnx is not None:
            self._flow(self.cnx, 1)  # SEM-2.4: zero-queue consumer
        deadline = None if timeout_millis is None else self._loop.time() + timeout_millis / 1000
        while not self._queue:
            if self.state in (State.CLOSING, State.CLOSED, State.FAILED):
                raise self.failure or AlreadyClosed(f"consumer on {self.topic_name} is closed")
            waiter = self._loop.create_future()
            self._waiters.append(waiter)
            try:
                if deadline is None:
                    await waiter
                else:
                    remaining = deadline - self._loop.time()
                    if remaining <= 0:
                        raise Timeout(f"no message within {timeout_millis} ms")
                    await asyncio.wait_for(waiter, remaining)
            except TimeoutError:
                raise Timeout(f"no message within {timeout_millis} ms") from None
        msg = self._queue.popleft()
        self._free_permits(1)
        return msg

    async def acknowledge(self, target: Message | MessageId) -> None:
        """Acknowledge one message (a batch entry is acked once all its messages are)."""
        ids = target._ack_ids if isinstance(target, Message) else (target,)
        entries: list[tuple[int, int]] = []
        for msg_id in ids:
            if msg_id.batch_index >= 0:
                key = (msg_id.ledger_id, msg_id.entry_id)
                unacked = self._batch_unacked.get(key)
                if unacked is None:
                    continue
                unacked.discard(msg_id.batch_index)
                if unacked:
                    continue
                del self._batch_unacked[key]
            entries.append((msg_id.ledger_id, msg_id.entry_id))
        if entries:
            self._send_ack(entries)

    def _send_ack(
        self, entries: list[tuple[int, int]], validation_error: int | None = None
    ) -> None:
        cnx = self.cnx
        if cnx is None:
            return  # unacked messages come back after the reconnect
        ack = pb.CommandAck(consumer_id=self.consumer_id, ack_type=_ACK.Individual)
        for ledger, entry in entries:
            ack.message_id.add(ledgerId=to_unsigned64(ledger), entryId=to_unsigned64(entry))
        if validation_error is not None:
            ack.validation_error = validation_error  # type: ignore[assignment]
        cnx.send_command(ack)

    async def unsubscribe(self) -> None:
        cnx = self.cnx
        if cnx is None:
            raise AlreadyClosed(f"consumer on {self.topic_name} is not connected")
        request_id = cnx.new_request_id()
        await cnx.request(
            pb.CommandUnsubscribe(consumer_id=self.consumer_id, request_id=request_id), request_id
        )
        await self.close()

    async def close(self) -> None:
        if self.state in (State.CLOSING, State.CLOSED):
            return
        self.state = State.CLOSING
        await self.stop_reconnecting()
        cnx, self.cnx = self.cnx, None
        if cnx is not None and not cnx.is_closed:
            cnx.remove_consumer(self.consumer_id, self)
            request_id = cnx.new_request_id()
            try:
                await cnx.request(
                    pb.CommandCloseConsumer(consumer_id=self.consumer_id, request_id=request_id),
                    request_id,
                )
            except PulsarException as exc:
                self._log.debug("close consumer not confirmed", error=str(exc))
        self.state = State.CLOSED
        self._wake_all()
        self.context.endpoints.discard(self)
