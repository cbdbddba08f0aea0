"""Producer: one topic (or one partition), its pending queue and its batch container.

Every message gets a sequence id and becomes part of an OpSendMsg (one SEND
frame: a single message, a batch, or one chunk of a large message). Ops wait
in `_pending` until their SEND_RECEIPT; receipts come back in order (WIRE 5),
so the head op is always the one being answered. On reconnect every pending
op is written again, in order, on the new connection. With a send timeout,
the head op expiring fails every pending op (as the official client does);
a send timeout of 0 retries forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid as _uuid
from collections import deque
from collections.abc import Callable

from magnetar.client.aio.compression import compress
from magnetar.client.aio.config import ProducerConfiguration
from magnetar.client.aio.crypto import ProducerCrypto
from magnetar.client.aio.enums import BatchingType, CompressionType, ProducerAccessMode
from magnetar.client.aio.errors import (
    AlreadyClosed,
    ChecksumError,
    ConnectError,
    MessageTooBig,
    ProducerQueueIsFull,
    PulsarException,
    Timeout,
)
from magnetar.client.aio.message import OutgoingMessage, SendCallback
from magnetar.client.aio.net import commands
from magnetar.client.aio.net.connection import ClientConnection
from magnetar.client.aio.net.context import ClientContext
from magnetar.client.aio.net.handler import ConnectionHandler, State
from magnetar.client.aio.producer.batch import BatchContainer, BatchPayload, KeyBasedBatchContainer
from magnetar.client.aio.producer.pending import OpSendMsg, call_back
from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.errors import ProtocolError, ServerError
from magnetar.proto.ids import MessageId, to_signed64
from magnetar.proto.naming import TopicName

# Checksum block, metadata size field and some room for the SEND command.
_FRAME_OVERHEAD = 10


class Producer(ConnectionHandler):
    """A producer on one topic or partition. Create it with `Client.create_producer`."""

    def __init__(
        self,
        context: ClientContext,
        topic: TopicName,
        conf: ProducerConfiguration,
        partition: int = -1,
    ) -> None:
        super().__init__(context, topic)
        self.conf = conf
        self.partition = partition
        self.producer_id = next(context.producer_ids)
        self._name = conf.producer_name or ""
        self._user_named = bool(conf.producer_name)
        self._epoch = 0
        self._created = False
        self._loop = asyncio.get_running_loop()
        self._pending: deque[OpSendMsg] = deque()
        self._pending_messages = 0
        self._max_pending = conf.max_pending_messages if conf.max_pending_messages > 0 else 1 << 62
        self._capacity_waiters: deque[asyncio.Future[None]] = deque()
        initial = conf.initial_sequence_id
        self._last_sequence_id_published = initial if initial is not None else -1
        self._next_sequence_id = self._last_sequence_id_published + 1
        self._codec = CompressionType(conf.compression_type)
        self._crypto: ProducerCrypto | None = None
        if conf.encryption_keys and conf.crypto_key_reader is not None:
            self._crypto = ProducerCrypto(list(conf.encryption_keys), conf.crypto_key_reader)
        self._send_timeout = conf.send_timeout_millis / 1000.0
        self._send_timer: asyncio.TimerHandle | None = None
        self._batcher: BatchContainer | None = None
        if conf.batching_enabled:
            container = (
                KeyBasedBatchContainer
                if conf.batching_type == BatchingType.KeyBased
                else BatchContainer
            )
            self._batcher = container(
                conf.batching_max_messages, conf.batching_max_allowed_size_in_bytes
            )
        self._batch_delay = conf.batching_max_publish_delay_ms / 1000.0
        self._batch_timer: asyncio.TimerHandle | None = None
        self.max_message_size = 5 * 1024 * 1024
        self.schema_version = b""
        # Told how many messages left the pending queue (answered or failed);
        # the blocking facade counts its own limit with it.
        self.release_listener: Callable[[int], None] | None = None

    # -- accessors (official names) ----------------------------------------

    def topic(self) -> str:
        return str(self.topic_name)

    def producer_name(self) -> str:
        return self._name

    def last_sequence_id(self) -> int:
        return self._last_sequence_id_published

    @property
    def pending_count(self) -> int:
        """Messages accepted and not yet answered (batched ones included)."""
        return self._pending_messages

    # -- attach -----------------------------------------------------------

    async def attach(self, cnx: ClientConnection) -> None:
        request_id = cnx.new_request_id()
        command = commands.producer(
            str(self.topic_name),
            self.producer_id,
            request_id,
            epoch=self._epoch,
            producer_name=self._name,
            user_provided_producer_name=self._user_named,
            access_mode=int(self.conf.access_mode),
            schema=self.conf.schema,
            properties=self.conf.properties,
        )
        self._epoch += 1
        # WaitForExclusive may stay queued behind another producer for a long time.
        timeout = 0.0 if self.conf.access_mode == ProducerAccessMode.WaitForExclusive else None
        frame = await cnx.request(command, request_id, timeout=timeout)
        success = frame.command.producer_success
        if self.state in (State.CLOSING, State.CLOSED):
            close_id = cnx.new_request_id()
            cnx.send_command(commands.close_producer(self.producer_id, close_id))
            raise AlreadyClosed(f"producer on {self.topic_name} closed while connecting")
        if cnx.is_closed:
            raise ConnectError(f"connection to {cnx.address} closed while creating the producer")
        self._name = success.producer_name
        if not self._created:
            self._created = True
            # Continue after what the broker has from this producer name (SEM-7.4).
            if self.conf.initial_sequence_id is None and success.last_sequence_id >= 0:
                self._last_sequence_id_published = success.last_sequence_id
                self._next_sequence_id = success.last_sequence_id + 1
        self.schema_version = success.schema_version
        self.max_message_size = cnx.max_message_size
        self.cnx = cnx
        cnx.register_producer(self.producer_id, self)
        self.state = State.READY
        self._log.debug("producer ready", producer=self._name, resend=len(self._pending))
        for op in self._pending:
            cnx.write(op.frame)

    def on_disconnected(self) -> None:
        """Pending ops stay queued; the reconnect writes them again."""

    def on_fatal(self, error: PulsarException) -> None:
        self._fail_everything(error)

    def handle_close_producer(self) -> None:
        # The broker closed us (topic unloaded, fenced...): reconnect like after a drop.
        self._log.info("broker closed the producer")
        cnx = self.cnx
        if cnx is not None:
            self.connection_closed(cnx)

    # -- sending ----------------------------------------------------------

    def _check_can_send(self) -> None:
        if self.state in (State.READY, State.CONNECTING):
            return
        if self.state is State.FAILED and self.failure is not None:
            raise type(self.failure)(str(self.failure))
        raise AlreadyClosed(f"producer on {self.topic_name} is {self.state.value}")

    def has_capacity(self) -> bool:
        return self._pending_messages < self._max_pending

    async def wait_for_capacity(self) -> None:
        while self._pending_messages >= self._max_pending:
            self._check_can_send()
            waiter = self._loop.create_future()
            self._capacity_waiters.append(waiter)
            try:
                await waiter
            finally:
                if not waiter.done():
                    waiter.cancel()

    def _release(self, count: int) -> None:
        self._pending_messages -= count
        if self.release_listener is not None and count:
            self.release_listener(count)
        waiters = self._capacity_waiters
        while waiters and self._pending_messages < self._max_pending:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                break

    async def send(self, msg: OutgoingMessage) -> MessageId:
        """Send and wait for the broker's receipt; blocks for room when configured to."""
        if self.conf.block_if_queue_full:
            await self.wait_for_capacity()
        future: asyncio.Future[MessageId] = self._loop.create_future()

        def done(error: PulsarException | None, msg_id: MessageId | None) -> None:
            if future.done():
                return
            if error is not None:
                future.set_exception(error)
            else:
                assert msg_id is not None
                future.set_result(msg_id)

        self.send_async(msg, done)
        return await future

    def send_async(self, msg: OutgoingMessage, callback: SendCallback | None) -> None:
        """Queue a message; `callback(error, message_id)` runs when it is answered.

        Raises at once (without calling back) when the producer is closed, the
        pending queue is full, or the message is too big to send.
        """
        self._check_can_send()
        if self._pending_messages >= self._max_pending:
            raise ProducerQueueIsFull(
                f"producer on {self.topic_name} has {self._pending_messages} pending messages"
            )
        sequence_id = msg.sequence_id if msg.sequence_id is not None else self._next_sequence_id
        batcher = self._batcher
        if batcher is not None and msg.deliver_at is None:
            if len(msg.payload) > self.max_message_size:
                raise MessageTooBig(
                    f"message of {len(msg.payload)} bytes exceeds the broker's "
                    f"maximum of {self.max_message_size}"
                )
            if not batcher.has_room_for(msg):
                self._flush_batch()
            batcher.add(msg, sequence_id, callback)
            if batcher.is_full():
                self._flush_batch()
            elif self._batch_timer is None:
                self._batch_timer = self._loop.call_later(self._batch_delay, self._on_batch_timer)
        else:
            if batcher is not None and not batcher.is_empty:
                # Delayed messages go alone; flush first so order is kept.
                self._flush_batch()
            self._send_single(msg, sequence_id, callback)
        self._pending_messages += 1
        if msg.sequence_id is None:
            self._next_sequence_id = sequence_id + 1

    def _metadata(self, sequence_id: int, uncompressed_size: int) -> pb.MessageMetadata:
        meta = pb.MessageMetadata(
            producer_name=self._name,
            sequence_id=sequence_id,
            publish_time=int(time.time() * 1000),
            uncompressed_size=uncompressed_size,
        )
        if self._codec:
            meta.compression = int(self._codec)  # type: ignore[assignment]
        if self.schema_version:
            meta.schema_version = self.schema_version
        return meta

    def _send_single(
        self, msg: OutgoingMessage, sequence_id: int, callback: SendCallback | None
    ) -> None:
        payload = msg.payload
        body = compress(self._codec, payload)
        meta = self._metadata(sequence_id, len(payload))
        msg.fill_metadata(meta)
        if self._crypto is not None:
            body = self._crypto.encrypt(meta, body)
        limit = self.max_message_size
        size = len(body) + meta.ByteSize() + _FRAME_OVERHEAD
        chunk_limit = self.conf.chunk_max_message_size
        if self.conf.chunking_enabled and (
            size > limit or (chunk_limit is not None and len(body) > chunk_limit)
        ):
            self._send_chunks(meta, body, sequence_id, callback)
            return
        if size > limit:
            raise MessageTooBig(
                f"message of {size} bytes exceeds the broker's maximum of {limit} "
                "(enable chunking to send it)"
            )
        frame = commands.send(self.producer_id, sequence_id, sequence_id, 1, meta, body)
        self._enqueue(
            OpSendMsg(frame, sequence_id, sequence_id, [callback], is_batch=False, weight=1)
        )

    def _send_chunks(
        self,
        meta: pb.MessageMetadata,
        body: bytes,
        sequence_id: int,
        callback: SendCallback | None,
    ) -> None:
        """SEM-8.2: split the (compressed) payload into chunks that share a uuid."""
        # Room for the chunk fields and the uuid on top of the message's metadata.
        headroom = meta.ByteSize() + len(self._name) + 64 + _FRAME_OVERHEAD
        chunk_size = self.max_message_size - headroom
        if self.conf.chunk_max_message_size is not None:
            chunk_size = min(chunk_size, self.conf.chunk_max_message_size)
        if chunk_size < 1:
            raise MessageTooBig("message metadata leaves no room for chunk payloads")
        total = len(body)
        num_chunks = max(1, -(-total // chunk_size))
        uuid = f"{self._name}-{sequence_id}-{_uuid.uuid4().hex[:8]}"
        for chunk_id in range(num_chunks):
            chunk_meta = pb.MessageMetadata()
            chunk_meta.CopyFrom(meta)
            chunk_meta.uuid = uuid
            chunk_meta.chunk_id = chunk_id
            chunk_meta.num_chunks_from_msg = num_chunks
            chunk_meta.total_chunk_msg_size = total
            part = body[chunk_id * chunk_size : (chunk_id + 1) * chunk_size]
            last = chunk_id == num_chunks - 1
            frame = commands.send(
                self.producer_id, sequence_id, sequence_id, 1, chunk_meta, part, is_chunk=True
            )
            self._enqueue(
                OpSendMsg(
                    frame,
                    sequence_id,
                    sequence_id,
                    [callback] if last else [],
                    is_batch=False,
                    weight=1 if last else 0,
                )
            )

    def _on_batch_timer(self) -> None:
        self._batch_timer = None
        self._flush_batch()

    def _flush_batch(self) -> None:
        if self._batch_timer is not None:
            self._batch_timer.cancel()
            self._batch_timer = None
        batcher = self._batcher
        if batcher is None or batcher.is_empty:
            return
        key_based = self.conf.batching_type == BatchingType.KeyBased
        for batch in batcher.drain():
            self._enqueue_batch(batch, key_based)

    def _enqueue_batch(self, batch: BatchPayload, key_based: bool) -> None:
        raw = batch.data
        body = compress(self._codec, raw)
        meta = self._metadata(batch.sequence_id, len(raw))
        meta.num_messages_in_batch = batch.num_messages
        if batch.highest_sequence_id != batch.sequence_id:
            meta.highest_sequence_id = batch.highest_sequence_id
        first = batch.first
        if key_based:
            # Key_Shared dispatches a batch by its entry-level key (SEM-4.4.5).
            if first.partition_key is not None:
                meta.partition_key = first.partition_key
            if first.ordering_key is not None:
                meta.ordering_key = first.ordering_key
        if first.replicate_to:
            meta.replicate_to.extend(first.replicate_to)
        if self._crypto is not None:
            body = self._crypto.encrypt(meta, body)
        size = len(body) + meta.ByteSize() + _FRAME_OVERHEAD
        if size > self.max_message_size:
            error = MessageTooBig(
                f"batch of {batch.num_messages} messages is {size} bytes, over the broker's "
                f"maximum of {self.max_message_size}"
            )
            self._release(batch.num_messages)
            for callback in batch.callbacks:
                call_back(callback, error, None)
            return
        frame = commands.send(
            self.producer_id,
            batch.sequence_id,
            batch.highest_sequence_id,
            batch.num_messages,
            meta,
            body,
        )
        self._enqueue(
            OpSendMsg(
                frame,
                batch.sequence_id,
                batch.highest_sequence_id,
                batch.callbacks,
                is_batch=True,
                weight=batch.num_messages,
            )
        )

    def _enqueue(self, op: OpSendMsg) -> None:
        if self._send_timeout > 0:
            op.deadline = self._loop.time() + self._send_timeout
            if self._send_timer is None:
                self._send_timer = self._loop.call_at(op.deadline, self._on_send_timeout)
        self._pending.append(op)
        cnx = self.cnx
        if cnx is not None and self.state is State.READY:
            cnx.write(op.frame)

    # -- receipts ---------------------------------------------------------

    def handle_send_receipt(self, receipt: pb.CommandSendReceipt) -> None:
        pending = self._pending
        if not pending:
            return
        op = pending[0]
        sequence_id = receipt.sequence_id
        if sequence_id < op.sequence_id:
            return  # an answer to a message already answered before a resend
        if sequence_id > op.highest_sequence_id:
            # The broker skipped a message: resend everything on a new connection.
            self._log.warning("receipt out of order", got=sequence_id, expected=op.sequence_id)
            if self.cnx is not None:
                self.cnx.abort(
                    ProtocolError(f"receipt for {sequence_id}, expected {op.sequence_id}")
                )
            return
        pending.popleft()
        self._release(op.weight)
        if op.highest_sequence_id > self._last_sequence_id_published:
            self._last_sequence_id_published = op.highest_sequence_id
        data = receipt.message_id
        ledger = to_signed64(data.ledgerId)
        entry = to_signed64(data.entryId)
        partition = self.partition
        callbacks = op.callbacks
        if op.is_batch:
            count = len(callbacks)
            for index, callback in enumerate(callbacks):
                if callback is not None:
                    call_back(callback, None, MessageId(ledger, entry, partition, index, count))
        elif callbacks and callbacks[0] is not None:
            call_back(callbacks[0], None, MessageId(ledger, entry, partition))
        if op.waiters:
            for waiter in op.waiters:
                if not waiter.done():
                    waiter.set_result(None)
        if not pending and self._send_timer is not None:
            self._send_timer.cancel()
            self._send_timer = None

    def handle_send_error(self, error: pb.CommandSendError) -> None:
        if int(error.error) == int(ServerError.ChecksumError) and self._pending:
            op = self._pending[0]
            if op.sequence_id == error.sequence_id:
                self._pending.popleft()
                self._fail_op(op, ChecksumError(error.message or "broker saw a bad checksum"))
                return
        # Any other error: reconnect and resend, as the official client does (WIRE 5).
        self._log.warning("send error, reconnecting", error=error.error, message=error.message)
        if self.cnx is not None:
            self.cnx.abort(ConnectError(f"SEND_ERROR {error.error}: {error.message}"))

    def _fail_op(self, op: OpSendMsg, error: PulsarException) -> None:
        self._release(op.weight)
        for callback in op.callbacks:
            call_back(callback, error, None)
        if op.waiters:
            for waiter in op.waiters:
                if not waiter.done():
                    waiter.set_exception(error)

    def _fail_pending(self, error: PulsarException) -> None:
        ops = list(self._pending)
        self._pending.clear()
        for op in ops:
            self._fail_op(op, error)

    def _fail_everything(self, error: PulsarException) -> None:
        if self._batch_timer is not None:
            self._batch_timer.cancel()
            self._batch_timer = None
        if self._batcher is not None and not self._batcher.is_empty:
            callbacks = self._batcher.fail_all()
            self._release(len(callbacks))
            for callback in callbacks:
                call_back(callback, error, None)
        self._fail_pending(error)
        if self._send_timer is not None:
            self._send_timer.cancel()
            self._send_timer = None
        for waiter in self._capacity_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._capacity_waiters.clear()

    def _on_send_timeout(self) -> None:
        self._send_timer = None
        if not self._pending:
            return
        head = self._pending[0]
        now = self._loop.time()
        if head.deadline <= now:
            self._log.warning("send timed out", pending=len(self._pending))
            self._fail_pending(Timeout(f"no receipt from the broker within {self._send_timeout}s"))
        else:
            self._send_timer = self._loop.call_at(head.deadline, self._on_send_timeout)

    # -- flush and close ----------------------------------------------------

    async def flush(self) -> None:
        """Send what is batched and wait until every pending message is answered."""
        if self.state in (State.CLOSED, State.CLOSING):
            raise AlreadyClosed(f"producer on {self.topic_name} is closed")
        self._flush_batch()
        if not self._pending:
            return
        waiter: asyncio.Future[None] = self._loop.create_future()
        last = self._pending[-1]
        if last.waiters is None:
            last.waiters = []
        last.waiters.append(waiter)
        await waiter

    async def close(self) -> None:
        """Send what is batched, wait for pending receipts, then close (idempotent)."""
        if self.state in (State.CLOSING, State.CLOSED):
            return
        was_ready = self.state is State.READY
        self._flush_batch()
        if was_ready and self._pending:
            with contextlib.suppress(PulsarException, TimeoutError):
                await asyncio.wait_for(self.flush(), self.context.operation_timeout)
        self.state = State.CLOSING
        await self.stop_reconnecting()
        cnx, self.cnx = self.cnx, None
        if cnx is not None and not cnx.is_closed:
            cnx.remove_producer(self.producer_id, self)
            request_id = cnx.new_request_id()
            try:
                await cnx.request(commands.close_producer(self.producer_id, request_id), request_id)
            except PulsarException as exc:
                self._log.debug("close producer not confirmed", error=str(exc))
        self._fail_everything(AlreadyClosed(f"producer on {self.topic_name} was closed"))
        self.state = State.CLOSED
        self.context.endpoints.discard(self)
