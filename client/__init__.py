"""Magnetar's blocking client, shaped like the official `pulsar` module.

    from magnetar import client as pulsar

    client = pulsar.Client("pulsar://localhost:6650")
    producer = client.create_producer("my-topic")
    producer.send(b"hello")
    client.close()

Class, method and keyword names and defaults follow `pulsar-client`; our
additions are extra keywords. The asynchronous core runs on a private
event-loop thread (see `magnetar.client.aio` for the awaitable API).
"""

from __future__ import annotations

import concurrent.futures
import re
import time
from collections.abc import Callable, Coroutine, Mapping
from datetime import timedelta
from typing import Any, TypeVar

from magnetar.client.aio import client as _aio_client
from magnetar.client.aio import consumer as _aio_consumer
from magnetar.client.aio import message as _aio_message
from magnetar.client.aio import multi_topic as _aio_multi
from magnetar.client.aio.enums import (
    BatchingType,
    CompressionType,
    ConsumerCryptoFailureAction,
    ConsumerType,
    InitialPosition,
    KeySharedMode,
    PartitionsRoutingMode,
    ProducerAccessMode,
    RegexSubscriptionMode,
)
from magnetar.client.aio.errors import *  # noqa: F403 (the official module exports them all)
from magnetar.client.aio.errors import (
    AlreadyClosed,
    InvalidConfiguration,
    ProducerQueueIsFull,
    PulsarException,
    Result,
    Timeout,
)
from magnetar.client.aio.message import LOCAL_CLUSTER_ONLY, OutgoingMessage
from magnetar.client.aio.partitioned_producer import PartitionedProducer as _AioPartitioned
from magnetar.client.aio.policies import BatchReceivePolicy as ConsumerBatchReceivePolicy
from magnetar.client.aio.policies import DeadLetterPolicy as ConsumerDeadLetterPolicy
from magnetar.client.aio.policies import KeySharedPolicy as ConsumerKeySharedPolicy
from magnetar.client.aio.producer import Producer as _AioProducer
from magnetar.client.messages import Message, MessageId
from magnetar.client.reader import Reader
from magnetar.client.sync import LoopThread, Permits, Submitter, ThreadQueue
from magnetar.proto import ids as _ids
from magnetar.proto.hashes import DEFAULT_HASHING_SCHEME, HashingScheme

_R = TypeVar("_R")

__all__ = [
    "BatchingType",
    "Client",
    "CompressionType",
    "Consumer",
    "ConsumerBatchReceivePolicy",
    "ConsumerCryptoFailureAction",
    "ConsumerDeadLetterPolicy",
    "ConsumerKeySharedPolicy",
    "ConsumerType",
    "InitialPosition",
    "KeySharedMode",
    "Message",
    "MessageId",
    "PartitionsRoutingMode",
    "Producer",
    "ProducerAccessMode",
    "PulsarException",
    "Reader",
    "RegexSubscriptionMode",
    "Result",
]

SendCallbackSync = Callable[[Result, "MessageId | None"], None]


def _build_message(
    schema: Any,
    content: Any,
    properties: Mapping[str, str] | None,
    partition_key: str | None,
    ordering_key: str | None,
    sequence_id: int | None,
    replication_clusters: list[str] | None,
    disable_replication: bool,
    event_timestamp: int | None,
    deliver_at: int | None,
    deliver_after: timedelta | None,
) -> OutgoingMessage:
    null_value = content is None
    if null_value:
        payload = b""
    else:
        payload = schema.encode(content) if schema is not None else content
        if not isinstance(payload, bytes | bytearray | memoryview):
            raise ValueError(f"content must be bytes, got {type(payload).__name__}")
        payload = bytes(payload)
    if deliver_after is not None:
        deliver_at = int(time.time() * 1000 + deliver_after.total_seconds() * 1000)
    replicate_to = [LOCAL_CLUSTER_ONLY] if disable_replication else replication_clusters
    return OutgoingMessage(
        payload,
        properties=properties,
        partition_key=partition_key,
        ordering_key=ordering_key,
        sequence_id=sequence_id,
        event_time=event_timestamp,
        deliver_at=deliver_at,
        replicate_to=replicate_to,
        null_value=null_value,
    )


def _wrap_callback(
    callback: SendCallbackSync,
) -> Callable[[PulsarException | None, _ids.MessageId | None], None]:
    def answered(error: PulsarException | None, msg_id: _ids.MessageId | None) -> None:
        if error is not None:
            callback(error.result, None)
        else:
            assert msg_id is not None
            callback(Result.Ok, MessageId.wrap(msg_id))

    return answered


class Producer:
    """Blocking producer; `send_async` callbacks run on the client's loop thread."""

    def __init__(
        self,
        client: Client,
        producer: _AioProducer | _AioPartitioned,
        schema: Any,
        permits: Permits,
        block_if_queue_full: bool,
    ) -> None:
        self._client = client
        self._producer = producer
        self._schema = schema
        self._permits = permits
        self._block = block_if_queue_full
        self._submit = client.submit
        # The core tells us when messages leave its queue, answered or failed.
        cores = producer.producers if isinstance(producer, _AioPartitioned) else [producer]
        for core in cores:
            core.release_listener = permits.release

    def topic(self) -> str:
        return self._producer.topic()

    def producer_name(self) -> str:
        return self._producer.producer_name()

    def last_sequence_id(self) -> int:
        return self._producer.last_sequence_id()

    def is_connected(self) -> bool:
        return self._producer.is_connected()

    def send(
        self,
        content: Any,
        properties: Mapping[str, str] | None = None,
        partition_key: str | None = None,
        ordering_key: str | None = None,
        sequence_id: int | None = None,
        replication_clusters: list[str] | None = None,
        disable_replication: bool = False,
        event_timestamp: int | None = None,
        deliver_at: int | None = None,
        deliver_after: timedelta | None = None,
    ) -> MessageId:
        """Publish and block until the broker acknowledged the message."""
        import concurrent.futures

        self._check_open()
        msg = _build_message(
            self._schema, content, properties, partition_key, ordering_key, sequence_id,
            replication_clusters, disable_replication, event_timestamp, deliver_at, deliver_after,
        )  # fmt: skip
        future: concurrent.futures.Future[MessageId] = concurrent.futures.Future()

        def answered(error: PulsarException | None, msg_id: _ids.MessageId | None) -> None:
            if error is not None:
                future.set_exception(error)
            else:
                assert msg_id is not None
                future.set_result(MessageId.wrap(msg_id))

        if not self._permits.acquire(self._block):
            raise ProducerQueueIsFull(f"producer on {self.topic()} has too many pending messages")
        self._submit(self._send_in_loop, msg, answered)
        return future.result()

    def send_async(
        self,
        content: Any,
        callback: SendCallbackSync | None,
        properties: Mapping[str, str] | None = None,
        partition_key: str | None = None,
        ordering_key: str | None = None,
        sequence_id: int | None = None,
        replication_clusters: list[str] | None = None,
        disable_replication: bool = False,
        event_timestamp: int | None = None,
        deliver_at: int | None = None,
        deliver_after: timedelta | None = None,
    ) -> None:
        """Queue a message; `callback(result, message_id)` runs once it is answered.

        Callbacks run on the client's loop thread, as the official client runs
        them on its I/O thread; they must not block.
        """
        self._check_open()
        if (
            content.__class__ is bytes
            and self._schema is None
            and not (properties or partition_key or ordering_key or replication_clusters)
            and sequence_id is None
            and not (disable_replication or event_timestamp or deliver_at or deliver_after)
        ):
            msg = OutgoingMessage(content)  # the common case, kept cheap
        else:
            msg = _build_message(
                self._schema, content, properties, partition_key, ordering_key, sequence_id,
                replication_clusters, disable_replication, event_timestamp, deliver_at,
                deliver_after,
            )  # fmt: skip
        if not self._permits.acquire(self._block):
            if callback is not None:
                callback(Result.ProducerQueueIsFull, None)
            return
        answered = None if callback is None else _wrap_callback(callback)
        self._submit(self._send_in_loop, msg, answered)

    def _check_open(self) -> None:
        if self._client.closed:
            raise AlreadyClosed("the client is closed")

    def _send_in_loop(
        self,
        msg: OutgoingMessage,
        answered: Callable[[PulsarException | None, _ids.MessageId | None], None] | None,
    ) -> None:
        try:
            self._producer.send_async(msg, answered)
        except PulsarException as exc:
            # Refused before it was queued: the core never counted it.
            self._permits.release()
            if answered is not None:
                answered(exc, None)

    def _call(self, fn: Callable[[], Any]) -> Any:
        # Runs after everything submitted before it (the submitter keeps order).
        async def run() -> Any:
            return await fn()

        return self._client.run_ordered(run)

    def flush(self) -> None:
        """Send what is batched and wait until every pending message is answered."""
        self._check_open()
        self._call(self._producer.flush)

    def close(self) -> None:
        if not self._client.closed:  # closing the client closed its producers
            self._call(self._producer.close)


class Consumer:
    """A consumer; methods named as in `pulsar.Consumer`, plus our additions."""

    def __init__(
        self,
        client: Client,
        consumer: _aio_consumer.Consumer | _aio_multi.MultiTopicsConsumer,
        schema: Any,
    ) -> None:
        self._client = client
        self._consumer = consumer
        self._schema = schema
        # Filled by the loop thread (install_buffer) unless a listener consumes.
        self._buffer: ThreadQueue[_aio_message.Message] | None = None

    def install_buffer(self) -> None:
        """On the loop thread: messages go to a thread-side buffer, so receive()
        takes them without a loop round trip, as the official client's does."""
        buffer: ThreadQueue[_aio_message.Message] = ThreadQueue()
        core = self._consumer
        while (msg := core.queue.get_nowait()) is not None:
            buffer.put(msg)
        core.set_message_sink(lambda _c, msg: buffer.put(msg))
        if isinstance(core, _aio_consumer.Consumer) and core.retry_consumer is not None:
            # SEM-6.2: the retry topic's messages reach the same buffer.
            core.retry_consumer.set_message_sink(lambda _c, msg: buffer.put(msg))
        core.on_queue_cleared = buffer.clear
        core.on_closed = lambda: self._closed_buffer(buffer)
        self._buffer = buffer

    def _closed_buffer(self, buffer: ThreadQueue[_aio_message.Message]) -> None:
        """Closed or unsubscribed by the application: receive raises at once, as
        the official client's does; what was prefetched goes to the next
        consumer (the broker redelivers unacked messages)."""
        buffer.clear()
        topic = self._consumer.topic()
        buffer.close(lambda: AlreadyClosed(f"consumer on {topic} is closed"))

    def topic(self) -> str:
        return self._consumer.topic()

    def subscription_name(self) -> str:
        return self._consumer.subscription_name()

    def consumer_name(self) -> str:
        return self._consumer.consumer_name()

    def is_connected(self) -> bool:
        return self._consumer.is_connected()

    def _take(
        self, timeout: float | None, delivered: list[_aio_message.Message] | None = None
    ) -> _aio_message.Message | None:
        buffer = self._buffer
        if buffer is None:
            raise InvalidConfiguration(
                "the consumer has a message listener: receive is not allowed"
            )
        if self._consumer.conf.receiver_queue_size == 0 and not len(buffer):
            self._client.submit(self._consumer.request_one)
        msg = buffer.get(timeout)
        if msg is not None:
            if delivered is None:
                self._client.submit(self._consumer.message_delivered, msg)
            else:
                delivered.append(msg)  # the caller reports them in one submit
        return msg

    def receive(self, timeout_millis: int | None = None) -> Message:
        msg = self._take(None if timeout_millis is None else timeout_millis / 1000)
        if msg is None:
            raise Timeout(f"no message within {timeout_millis} ms")
        return Message(msg, self._schema)

    def batch_receive(self) -> list[Message]:
        """Messages until a limit of the batch receive policy (SEM-1) is hit."""
        policy = self._consumer.conf.batch_receive_policy
        deadline = time.monotonic() + policy.timeout_ms / 1000 if policy.timeout_ms > 0 else None
        out: list[Message] = []
        delivered: list[_aio_message.Message] = []
        size = 0
        try:
            while not (0 < policy.max_num_message <= len(out)):
                remaining = None if deadline is None else max(deadline - time.monotonic(), 0.0)
                msg = self._take(remaining, delivered)
                if msg is None:
                    break
                out.append(Message(msg, self._schema))
                size += len(msg._data)
                if 0 < policy.max_num_bytes <= size:
                    break
        finally:
            if delivered:
                self._client.submit(self._consumer.messages_delivered, delivered)
        return out

    @staticmethod
    def _target(message: Message | MessageId) -> Any:
        return message._msg if isinstance(message, Message) else message.inner

    def acknowledge(self, message: Message | MessageId) -> None:
        """SEM-3.4: grouped and sent by the loop; waits for the broker with ack receipts."""
        target = self._target(message)
        self._consumer.check_target(target)
        if self._consumer.conf.ack_receipt_enabled:
            self._client.run(self._consumer.acknowledge(target))
        else:
            self._client.submit(self._consumer.ack_nowait, target)

    def acknowledge_cumulative(self, message: Message | MessageId) -> None:
        self._consumer.check_cumulative()
        target = self._target(message)
        self._consumer.check_target(target)
        if self._consumer.conf.ack_receipt_enabled:
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
        target = messageid.inner if isinstance(messageid, MessageId) else int(messageid)
        self._client.run_ordered(lambda: self._consumer.seek(target))

    def get_last_message_id(self) -> MessageId:
        return MessageId.wrap(self._client.run(self._consumer.get_last_message_id()))

    def reconsume_later(
        self, message: Message, delay_millis: int, properties: dict[str, str] | None = None
    ) -> None:
        """SEM-6.2 (not in the official Python client): retry `message` after a delay."""
        self._client.run_ordered(
            lambda: self._consumer.reconsume_later(message._msg, delay_millis, properties)
        )

    def unsubscribe(self) -> None:
        self._client.run_ordered(self._consumer.unsubscribe)

    def close(self) -> None:
        if not self._client.closed:
            self._client.run_ordered(self._consumer.close)


class Client:
    """Blocking client; one private event-loop thread per client."""

    def __init__(
        self,
        service_url: str,
        authentication: Any = None,
        operation_timeout_seconds: int = 30,
        io_threads: int = 1,
        message_listener_threads: int = 1,
        concurrent_lookup_requests: int = 50000,
        log_conf_file_path: str | None = None,
        stats_interval_in_seconds: int = 600,
        use_tls: bool = False,
        tls_trust_certs_file_path: str | None = None,
        tls_allow_insecure_connection: bool = False,
        tls_validate_hostname: bool = False,
        logger: Any = None,
        connection_timeout_ms: int = 10000,
        listener_name: str | None = None,
        tls_private_key_file_path: str | None = None,
        tls_certificate_file_path: str | None = None,
        **extra: Any,
    ) -> None:
        if tls_private_key_file_path or tls_certificate_file_path or tls_trust_certs_file_path:
            raise InvalidConfiguration("TLS is not supported yet")
        self._client = _aio_client.Client(
            service_url,
            authentication=authentication,
            operation_timeout_seconds=operation_timeout_seconds,
            use_tls=use_tls,
            connection_timeout_ms=connection_timeout_ms,
            stats_interval_in_seconds=stats_interval_in_seconds,
            **extra,
        )
        self._loop = LoopThread()
        self._submitter = Submitter(self._loop.loop)
        self._listener_threads = max(int(message_listener_threads), 1)
        self._listeners: concurrent.futures.ThreadPoolExecutor | None = None
        self._closed = False

    # -- the loop thread, for this package's producer and consumer wrappers --

    @property
    def closed(self) -> bool:
        return self._closed

    def run(self, coro: Coroutine[Any, Any, _R], timeout: float | None = None) -> _R:
        """Run a coroutine on the client's loop thread and wait for its result."""
        return self._loop.run(coro, timeout)

    def submit(self, fn: Callable[..., object], *args: Any) -> None:
        """Call `fn(*args)` on the loop thread, in submission order, without waiting."""
        self._submitter.submit(fn, *args)

    def run_ordered(self, make: Callable[[], Any]) -> Any:
        """Run a coroutine on the loop after everything already submitted."""
        import concurrent.futures

        future: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def start() -> None:
            task = self._loop.loop.create_task(make())

            def finished(t: Any) -> None:
                if t.cancelled():
                    future.cancel()
                elif t.exception() is not None:
                    future.set_exception(t.exception())
                else:
                    future.set_result(t.result())

            task.add_done_callback(finished)

        self._submitter.submit(start)
        return future.result()

    def create_producer(
        self,
        topic: str,
        producer_name: str | None = None,
        schema: Any = None,
        initial_sequence_id: int | None = None,
        send_timeout_millis: int = 30000,
        compression_type: CompressionType = CompressionType.NONE,
        max_pending_messages: int = 1000,
        max_pending_messages_across_partitions: int = 50000,
        block_if_queue_full: bool = False,
        batching_enabled: bool = False,
        batching_max_messages: int = 1000,
        batching_max_allowed_size_in_bytes: int = 128 * 1024,
        batching_max_publish_delay_ms: int = 10,
        chunking_enabled: bool = False,
        message_routing_mode: PartitionsRoutingMode = PartitionsRoutingMode.RoundRobinDistribution,
        lazy_start_partitioned_producers: bool = False,
        properties: Mapping[str, str] | None = None,
        batching_type: BatchingType = BatchingType.Default,
        encryption_key: str | None = None,
        crypto_key_reader: Any = None,
        access_mode: ProducerAccessMode = ProducerAccessMode.Shared,
        message_router: Callable[[Any, int], int] | None = None,
        *,
        chunk_max_message_size: int | None = None,
        hashing_scheme: HashingScheme = DEFAULT_HASHING_SCHEME,
    ) -> Producer:
        producer = self._loop.run(
            self._client.create_producer(
                topic,
                producer_name=producer_name,
                initial_sequence_id=initial_sequence_id,
                send_timeout_millis=send_timeout_millis,
                compression_type=compression_type,
                # The blocking facade owns the pending limit (it can block the caller).
                max_pending_messages=0,
                max_pending_messages_across_partitions=0,
                block_if_queue_full=False,
                batching_enabled=batching_enabled,
                batching_max_messages=batching_max_messages,
                batching_max_allowed_size_in_bytes=batching_max_allowed_size_in_bytes,
                batching_max_publish_delay_ms=batching_max_publish_delay_ms,
                chunking_enabled=chunking_enabled,
                message_routing_mode=message_routing_mode,
                lazy_start_partitioned_producers=lazy_start_partitioned_producers,
                properties=properties,
                batching_type=batching_type,
                encryption_key=encryption_key,
                crypto_key_reader=crypto_key_reader,
                access_mode=access_mode,
                message_router=message_router,
                chunk_max_message_size=chunk_max_message_size,
                hashing_scheme=hashing_scheme,
            )
        )
        limit = max_pending_messages
        if isinstance(producer, _AioPartitioned):
            per_partition = max_pending_messages * producer.num_partitions
            across = max_pending_messages_across_partitions
            limit = (
                min(per_partition, across)
                if per_partition and across
                else (per_partition or across)
            )
        return Producer(self, producer, schema, Permits(limit), block_if_queue_full)

    def subscribe(
        self,
        topic: str | list[str] | re.Pattern[str],
        subscription_name: str,
        consumer_type: ConsumerType = ConsumerType.Exclusive,
        schema: Any = None,
        message_listener: Any = None,
        receiver_queue_size: int = 1000,
        max_total_receiver_queue_size_across_partitions: int = 50000,
        consumer_name: str | None = None,
        unacked_messages_timeout_ms: int | None = None,
        broker_consumer_stats_cache_time_ms: int = 30000,
        negative_ack_redelivery_delay_ms: int = 60000,
        is_read_compacted: bool = False,
        properties: Mapping[str, str] | None = None,
        pattern_auto_discovery_period: int = 60,
        initial_position: InitialPosition = InitialPosition.Latest,
        crypto_key_reader: Any = None,
        replicate_subscription_state_enabled: bool = False,
        max_pending_chunked_message: int = 10,
        auto_ack_oldest_chunked_message_on_queue_full: bool = False,
        start_message_id_inclusive: bool = False,
        batch_receive_policy: Any = None,
        key_shared_policy: Any = None,
        batch_index_ack_enabled: bool = False,
        regex_subscription_mode: RegexSubscriptionMode = RegexSubscriptionMode.PersistentOnly,
        dead_letter_policy: Any = None,
        crypto_failure_action: ConsumerCryptoFailureAction = ConsumerCryptoFailureAction.FAIL,
        **ours: Any,
    ) -> Consumer:
        """A consumer; `ours` takes the async core's extra keywords (priority_level,
        enable_retry, ack_group_time_ms, ack_receipt_enabled, ...).

        The message listener runs on the client's listener thread, as
        listener(consumer, message) with this module's objects.
        """
        listener = None
        facade: list[Consumer] = []
        if message_listener is not None:
            user_listener = message_listener
            pool = self._listener_pool()

            def listener(_consumer: Any, msg: Any) -> Any:
                loop = self._loop.loop
                return loop.run_in_executor(pool, user_listener, facade[0], Message(msg, schema))

        consumer = self._loop.run(
            self._client.subscribe(
                topic,
                subscription_name,
                consumer_type=consumer_type,
                message_listener=listener,
                receiver_queue_size=receiver_queue_size,
                max_total_receiver_queue_size_across_partitions=max_total_receiver_queue_size_across_partitions,
                consumer_name=consumer_name,
                unacked_messages_timeout_ms=unacked_messages_timeout_ms,
                broker_consumer_stats_cache_time_ms=broker_consumer_stats_cache_time_ms,
                negative_ack_redelivery_delay_ms=negative_ack_redelivery_delay_ms,
                is_read_compacted=is_read_compacted,
                properties=properties,
                pattern_auto_discovery_period=pattern_auto_discovery_period,
                initial_position=initial_position,
                crypto_key_reader=crypto_key_reader,
                replicate_subscription_state_enabled=replicate_subscription_state_enabled,
                max_pending_chunked_message=max_pending_chunked_message,
                auto_ack_oldest_chunked_message_on_queue_full=auto_ack_oldest_chunked_message_on_queue_full,
                start_message_id_inclusive=start_message_id_inclusive,
                batch_receive_policy=batch_receive_policy,
                key_shared_policy=key_shared_policy,
                batch_index_ack_enabled=batch_index_ack_enabled,
                regex_subscription_mode=regex_subscription_mode,
                dead_letter_policy=dead_letter_policy,
                crypto_failure_action=crypto_failure_action,
                **ours,
            )
        )
        wrapper = Consumer(self, consumer, schema)
        if listener is None:
            self._loop.run(self._install(wrapper))
        facade.append(wrapper)
        return wrapper

    @staticmethod
    async def _install(consumer: Consumer) -> None:
        consumer.install_buffer()

    def _listener_pool(self) -> concurrent.futures.ThreadPoolExecutor:
        """The message listener threads (message_listener_threads of them)."""
        if self._listeners is None:
            self._listeners = concurrent.futures.ThreadPoolExecutor(
                self._listener_threads, thread_name_prefix="magnetar-listener"
            )
        return self._listeners

    def get_topic_partitions(self, topic: str) -> list[str]:
        return self._loop.run(self._client.get_topic_partitions(topic))

    def create_reader(
        self,
        topic: str,
        start_message_id: MessageId,
        schema: Any = None,
        reader_listener: Any = None,
        receiver_queue_size: int = 1000,
        reader_name: str | None = None,
        subscription_role_prefix: str | None = None,
        is_read_compacted: bool = False,
        crypto_key_reader: Any = None,
        start_message_id_inclusive: bool = False,
        crypto_failure_action: ConsumerCryptoFailureAction = ConsumerCryptoFailureAction.FAIL,
    ) -> Reader:
        """A reader of one topic (or partition) from `start_message_id`."""
        reader = self.run(
            self._client.create_reader(
                topic,
                start_message_id.inner,
                reader_listener=reader_listener,
                receiver_queue_size=receiver_queue_size,
                reader_name=reader_name,
                subscription_role_prefix=subscription_role_prefix,
                is_read_compacted=is_read_compacted,
                crypto_key_reader=crypto_key_reader,
                start_message_id_inclusive=start_message_id_inclusive,
                crypto_failure_action=crypto_failure_action,
            )
        )
        return Reader(self, reader, schema)

    def close(self) -> None:
        """Close every producer and consumer and stop the loop thread (idempotent)."""
        if self._closed:
            return
        self._closed = True
        try:
            self._loop.run(self._client.close())
        finally:
            self._loop.stop()
            if self._listeners is not None:
                self._listeners.shutdown(wait=False, cancel_futures=True)

    def shutdown(self) -> None:
        self.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
