"""Magnetar's asyncio client, shaped like the official `pulsar.asyncio` module.

    from magnetar.client import asyncio as pulsar_asyncio

    client = pulsar_asyncio.Client("pulsar://localhost:6650")
    producer = await client.create_producer("my-topic")
    msg_id = await producer.send(b"hello")
    await client.close()

Everything runs on the caller's event loop: these classes are thin wrappers
over the asynchronous core (`magnetar.client.aio`), with the official
module's names, keywords and defaults. Messages and ids are the blocking
facade's `Message` and `MessageId` (what `pulsar.Message` / `pulsar.MessageId`
are when `pulsar` resolves to `magnetar.client`), so code moves between the
two APIs unchanged. Errors are the core's `PulsarException` subclasses; each
answers `.error()` with its `Result`.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any, TypeAlias

from magnetar.client.aio import client as _aio_client, message as _aio_message
from magnetar.client.aio.config import (
    ConsumerConfiguration,
    ProducerConfiguration,
    facade_keywords,
)
from magnetar.client.aio.consumer.consumer import Consumer as _AioConsumer
from magnetar.client.aio.consumer.multi_topic import MultiTopicsConsumer as _AioMultiConsumer
from magnetar.client.aio.enums import (
    BatchingType,
    CompressionType,
    ConsumerCryptoFailureAction,
    ConsumerType,
    InitialPosition,
    PartitionsRoutingMode,
    ProducerAccessMode,
    RegexSubscriptionMode,
)
from magnetar.client.aio.errors import (
    ALL_EXCEPTIONS,
    AlreadyClosed,
    PulsarException,
    Result,
    UnknownError,
)
from magnetar.client.aio.net.auth import Authentication
from magnetar.client.aio.producer.partitioned import PartitionedProducer as _AioPartitioned
from magnetar.client.aio.producer.producer import Producer as _AioProducer
from magnetar.client.aio.reader.partitioned import PartitionedReader as _AioPartitionedReader
from magnetar.client.aio.reader.reader import Reader as _AioReader
from magnetar.client.schema import BytesSchema
from magnetar.client.sync.accessors import ConsumerAccessors, ProducerAccessors
from magnetar.client.sync.loggers import LogDestination
from magnetar.client.sync.messages import Message, MessageId, message_class, seek_target
from magnetar.client.sync.producer import build_message
from magnetar.proto import ids as _ids

__all__ = [
    "BatchingType",
    "Client",
    "CompressionType",
    "Consumer",
    "ConsumerCryptoFailureAction",
    "ConsumerType",
    "InitialPosition",
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

# What acknowledge and friends take: the facade's message or id, or the core's.
AckTarget: TypeAlias = Message | MessageId | _aio_message.Message | _ids.MessageId

_EXCEPTION_OF: dict[Result, type[PulsarException]] = {cls.result: cls for cls in ALL_EXCEPTIONS}


def _exception_for(result: Result, message: str = "") -> PulsarException:
    """The core's exception class for a result code, as an instance."""
    return _EXCEPTION_OF.get(Result(result), UnknownError)(message)


def _set_future(future: asyncio.Future[Any], result: Result, value: Any) -> None:
    """Complete `future` from a `(result, value)` callback called on any thread.

    The bridge the official module uses for its binding's callbacks; here it
    serves callbacks of the blocking facade (e.g. `send_async`, which calls
    back on the facade's loop thread) awaited from asyncio code. A future
    already done (cancelled, or answered) is left as it is.
    """

    def complete() -> None:
        if future.done():
            return
        if result == Result.Ok:
            future.set_result(value)
        else:
            future.set_exception(_exception_for(result))

    # Always deferred, as the official one is: the caller may hold locks.
    future.get_loop().call_soon_threadsafe(complete)


def _ack_target(message: AckTarget) -> _aio_message.Message | _ids.MessageId:
    # The facade's Message is the core's Message already; its MessageId wraps one.
    if isinstance(message, MessageId):
        return message.inner
    if isinstance(message, _aio_message.Message | _ids.MessageId):
        return message
    raise TypeError(f"expected a Message or a MessageId, got {type(message).__name__}")


class Producer(ProducerAccessors):
    """Publishes to one topic (or every partition of one). Made by `Client.create_producer`."""

    def __init__(self, client: Client, producer: _AioProducer | _AioPartitioned, schema: Any):
        self._client = client
        self._producer = producer
        self._schema = schema
        self._closed = False

    async def send(
        self,
        content: Any,
        properties: Mapping[str, str] | None = None,
        partition_key: str | None = None,
        ordering_key: str | None = None,
        sequence_id: int | None = None,
        replication_clusters: list[str] | None = None,
        disable_replication: bool | None = None,
        event_timestamp: int | None = None,
        deliver_at: int | None = None,
        deliver_after: timedelta | None = None,
    ) -> MessageId:
        """Publish `content` (encoded with the producer's schema) and wait for
        the broker's receipt: the id where it is stored."""
        self._client._check_open()
        msg = build_message(
            self._schema, content, properties, partition_key, ordering_key, sequence_id,
            replication_clusters, bool(disable_replication), event_timestamp, deliver_at,
            deliver_after,
        )  # fmt: skip
        return MessageId.wrap(await self._producer.send(msg))

    async def flush(self) -> None:
        """Send what is batched; return once every pending message is answered."""
        if self._closed or self._client._closed:
            raise AlreadyClosed(f"producer on {self.topic()} is closed")
        await self._producer.flush()

    async def close(self) -> None:
        """Flush and close; AlreadyClosed when closed before, as the official one."""
        if self._closed or self._client._closed:
            raise AlreadyClosed(f"producer on {self.topic()} is already closed")
        self._closed = True
        await self._producer.close()


class Consumer(ConsumerAccessors):
    """A subscription's consumer on one or several topics. Made by `Client.subscribe`."""

    def __init__(self, consumer: _AioConsumer | _AioMultiConsumer, schema: Any) -> None:
        self._consumer = consumer
        self._schema = schema
        self._message_class = message_class(schema)
        # The core decodes straight into our Message class: nothing to wrap.
        consumer.set_message_class(self._message_class)

    async def receive(self) -> Message:
        """The next message, waiting as long as it takes (cancel to stop)."""
        msg = await self._consumer.receive()
        # Anything queued before set_message_class is still the core's class.
        return self._message_class.of(msg)

    async def acknowledge(self, message: AckTarget) -> None:
        await self._consumer.acknowledge(_ack_target(message))

    async def acknowledge_cumulative(self, message: AckTarget) -> None:
        """Everything up to `message`; refused on Shared and Key_Shared subscriptions."""
        await self._consumer.acknowledge_cumulative(_ack_target(message))

    async def negative_acknowledge(self, message: AckTarget) -> None:
        """Have `message` redelivered after negative_ack_redelivery_delay_ms."""
        self._consumer.negative_acknowledge(_ack_target(message))

    async def unsubscribe(self) -> None:
        """Delete the subscription and close this consumer."""
        await self._consumer.unsubscribe()

    async def seek(self, messageid: MessageId | int) -> None:
        """Move the subscription to a message id or a publish time (ms since the epoch)."""
        await self._consumer.seek(seek_target(messageid))

    async def close(self) -> None:
        """Close (idempotent, as the official consumer's close is)."""
        await self._consumer.close()

    async def get_last_message_id(self) -> MessageId:
        return MessageId.wrap(await self._consumer.get_last_message_id())

    def redeliver_unacknowledged_messages(self) -> None:
        """Ask the broker to send every unacknowledged message again (no waiting)."""
        self._consumer.redeliver_unacknowledged_messages()


class Reader:
    """Reads a topic from a message id, without a durable subscription.
    Made by `Client.create_reader`."""

    def __init__(self, reader: _AioReader | _AioPartitionedReader, schema: Any) -> None:
        self._reader = reader
        self._schema = schema
        self._message_class = message_class(schema)
        if isinstance(reader, _AioReader):  # decoded as ours from the start
            reader.consumer.set_message_class(self._message_class)

    async def read_next(self) -> Message:
        """The next message, waiting as long as it takes (cancel to stop)."""
        return self._message_class.of(await self._reader.read_next())

    async def has_message_available(self) -> bool:
        return await self._reader.has_message_available()

    async def seek(self, messageid: MessageId | int) -> None:
        """To a message id (start_message_id_inclusive applies) or a publish time in ms."""
        await self._reader.seek(seek_target(messageid))

    async def close(self) -> None:
        """Close (idempotent)."""
        await self._reader.close()

    def topic(self) -> str:
        return self._reader.topic()

    def is_connected(self) -> bool:
        return self._reader.is_connected()


class Client:
    """The asyncio client: keywords as `pulsar.Client`'s; everything runs on
    the event loop of whoever awaits it."""

    def __init__(
        self,
        service_url: str,
        authentication: Authentication | None = None,
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
        """`extra` takes the core's own keywords (keepalive_interval_seconds, ...)."""
        # The client's log records go to `logger` while it is open, as in the
        # blocking facade.
        self._log_destination = LogDestination(logger) if logger is not None else None
        self._client = _aio_client.Client(
            service_url,
            authentication=authentication,
            operation_timeout_seconds=operation_timeout_seconds,
            io_threads=io_threads,
            message_listener_threads=message_listener_threads,
            concurrent_lookup_requests=concurrent_lookup_requests,
            log_conf_file_path=log_conf_file_path,
            stats_interval_in_seconds=stats_interval_in_seconds,
            use_tls=use_tls,
            tls_trust_certs_file_path=tls_trust_certs_file_path,
            tls_allow_insecure_connection=tls_allow_insecure_connection,
            tls_validate_hostname=tls_validate_hostname,
            connection_timeout_ms=connection_timeout_ms,
            listener_name=listener_name,
            tls_private_key_file_path=tls_private_key_file_path,
            tls_certificate_file_path=tls_certificate_file_path,
            **extra,
        )
        self._closed = False
        # The closing, once started (by shutdown or close); close awaits it.
        self._closing: asyncio.Task[None] | None = None
        if self._log_destination is not None:
            self._log_destination.attach()

    async def create_producer(
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
        batching_enabled: bool = True,
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
        **ours: Any,
    ) -> Producer:
        """A producer; batching is on by default here (off in the blocking
        `Client.create_producer`), as in the official modules. `ours` takes
        ProducerConfiguration's options beyond the official ones
        (chunk_max_message_size, hashing_scheme)."""
        options = facade_keywords(locals(), "topic")
        self._check_open()
        if batching_enabled and chunking_enabled:
            raise ValueError("Batching and chunking of messages can't be enabled together.")
        if schema is None:
            schema = options["schema"] = BytesSchema()
        conf = ProducerConfiguration.from_keywords(options)
        producer = await self._client.create_producer(topic, conf)
        return Producer(self, producer, schema)

    async def subscribe(
        self,
        topic: str | list[str],
        subscription_name: str,
        consumer_type: ConsumerType = ConsumerType.Exclusive,
        schema: Any = None,
        receiver_queue_size: int = 1000,
        max_total_receiver_queue_size_across_partitions: int = 50000,
        consumer_name: str | None = None,
        unacked_messages_timeout_ms: int | None = None,
        broker_consumer_stats_cache_time_ms: int = 30000,
        negative_ack_redelivery_delay_ms: int = 60000,
        is_read_compacted: bool = False,
        properties: Mapping[str, str] | None = None,
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
        is_pattern_topic: bool = False,
        **ours: Any,
    ) -> Consumer:
        """A consumer of a topic, a list of topics, or (is_pattern_topic) the
        topics a regex matches. `ours` takes ConsumerConfiguration's options
        beyond the official ones (priority_level, enable_retry,
        ack_receipt_enabled, ...)."""
        options = facade_keywords(locals(), "topic", "subscription_name", "is_pattern_topic")
        self._check_open()
        target: str | list[str] | re.Pattern[str]
        if isinstance(topic, str):
            target = re.compile(topic) if is_pattern_topic else topic
        elif isinstance(topic, list):
            if is_pattern_topic:
                raise ValueError(
                    "a pattern subscription takes one regex as a str, not a list of topics"
                )
            target = topic
        else:
            raise ValueError("Argument 'topic' is expected to be of type 'str' or 'list'")
        if schema is None:
            schema = options["schema"] = BytesSchema()
        conf = ConsumerConfiguration.from_keywords(options)
        consumer = await self._client.subscribe(target, subscription_name, conf)
        return Consumer(consumer, schema)

    async def create_reader(
        self,
        topic: str,
        start_message_id: MessageId | _ids.MessageId,
        schema: Any = None,
        receiver_queue_size: int = 1000,
        reader_name: str | None = None,
        subscription_role_prefix: str | None = None,
        is_read_compacted: bool = False,
        crypto_key_reader: Any = None,
        start_message_id_inclusive: bool = False,
        crypto_failure_action: ConsumerCryptoFailureAction = ConsumerCryptoFailureAction.FAIL,
    ) -> Reader:
        """A reader of `topic` from `start_message_id` (MessageId.earliest,
        MessageId.latest or a message's id)."""
        options = facade_keywords(locals(), "topic", "start_message_id", "subscription_role_prefix")
        self._check_open()
        if isinstance(start_message_id, MessageId):
            start = start_message_id.inner
        elif isinstance(start_message_id, _ids.MessageId):
            start = start_message_id
        else:
            raise ValueError(
                f"Argument 'start_message_id' is expected to be a MessageId, "
                f"not {type(start_message_id).__name__}"
            )
        if schema is None:
            schema = options["schema"] = BytesSchema()
        conf = ConsumerConfiguration.from_reader_keywords(options)
        reader = await self._client.create_reader(topic, start, conf, subscription_role_prefix)
        return Reader(reader, schema)

    async def get_topic_partitions(self, topic: str) -> list[str]:
        """The partitions' names of a partitioned topic, else `[topic]`."""
        self._check_open()
        if not isinstance(topic, str):
            raise ValueError(f"Argument 'topic' is expected to be a str, not {type(topic)}")
        return await self._client.get_topic_partitions(topic)

    def _check_open(self) -> None:
        # After shutdown() the core may not have begun closing yet.
        if self._closed:
            raise AlreadyClosed("the client is closed")

    def shutdown(self) -> None:
        """Stop at once: later calls raise AlreadyClosed, and the producers,
        consumers and connections close in the background (close() waits for
        that). Called outside a running loop, the closing is left to close()."""
        self._closed = True
        if self._closing is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return
            self._closing = loop.create_task(self._close(), name="pulsar-client-close")

    async def close(self) -> None:
        """Close every producer, consumer and reader, then the connections (idempotent)."""
        self._closed = True
        if self._closing is None:
            self._closing = asyncio.get_running_loop().create_task(
                self._close(), name="pulsar-client-close"
            )
        # Shielded: a caller that gives up waiting must not cut the close short.
        await asyncio.shield(self._closing)

    async def _close(self) -> None:
        try:
            await self._client.close()
        finally:
            if self._log_destination is not None:
                self._log_destination.detach()
