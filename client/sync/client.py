"""The blocking Client, named as `pulsar.Client`: one private event-loop
thread per client, producers, consumers, readers and table views on it."""

from __future__ import annotations

import concurrent.futures
import re
import weakref
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, TypeVar

from magnetar.client import schema
from magnetar.client.aio import client as _aio_client
from magnetar.client.aio.checks import check_enum, check_optional, check_type
from magnetar.client.aio.config import (
    ConsumerConfiguration,
    ProducerConfiguration,
    facade_keywords,
)
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
from magnetar.client.aio.net.failover import AutoClusterFailover, ServiceInfo, ServiceInfoProvider
from magnetar.client.aio.producer.partitioned import PartitionedProducer as _AioPartitioned
from magnetar.client.sync.consumer import Consumer
from magnetar.client.sync.loggers import LogDestination
from magnetar.client.sync.loop import LoopThread, Permits, Submitter
from magnetar.client.sync.messages import MessageId, message_class
from magnetar.client.sync.producer import Producer
from magnetar.client.sync.reader import Reader
from magnetar.client.sync.table_view import TableView

_R = TypeVar("_R")


def _attach(schema: Any, client: Client) -> None:
    """Give a consumer's or reader's schema the client, as the official
    client does: an Avro schema fetches writer schemas through it."""
    attach = getattr(schema, "attach_client", None)
    if callable(attach):
        attach(client)


def _close_collected(
    loop: LoopThread, client: _aio_client.Client, log_destination: LogDestination | None
) -> None:
    loop.close_then_stop(client.close(), _COLLECTED_CLOSE_SECONDS)
    if log_destination is not None:
        log_destination.detach()


# How long a client collected (or alive at exit) without close() may take
# to close its producers and consumers before its thread stops anyway.
_COLLECTED_CLOSE_SECONDS = 5.0


class Client:
    """Blocking client; one private event-loop thread per client."""

    def __init__(
        self,
        service_url: str | AutoClusterFailover | ServiceInfoProvider,
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
        self._client = _aio_client.Client(
            service_url,
            authentication=authentication,
            operation_timeout_seconds=operation_timeout_seconds,
            io_threads=io_threads,
            message_listener_threads=message_listener_threads,
            concurrent_lookup_requests=concurrent_lookup_requests,
            log_conf_file_path=log_conf_file_path,
            listener_name=listener_name,
            use_tls=use_tls,
            tls_trust_certs_file_path=tls_trust_certs_file_path,
            tls_allow_insecure_connection=tls_allow_insecure_connection,
            tls_validate_hostname=tls_validate_hostname,
            tls_private_key_file_path=tls_private_key_file_path,
            tls_certificate_file_path=tls_certificate_file_path,
            connection_timeout_ms=connection_timeout_ms,
            stats_interval_in_seconds=stats_interval_in_seconds,
            **extra,
        )
        self._log_destination = LogDestination(logger) if logger is not None else None
        self._loop = LoopThread()
        self._submitter = Submitter(self._loop.loop)
        self._listener_threads = max(int(message_listener_threads), 1)
        self._listeners: concurrent.futures.ThreadPoolExecutor | None = None
        self._closed = False
        if self._log_destination is not None:
            self._log_destination.attach()
        if not isinstance(service_url, str):
            self._loop.run(self._client.start())  # cluster probing starts now
        # A client dropped without close() still closes its connections and
        # ends its thread (the official client leaks neither); the finalizer
        # holds no reference to this object.
        self._finalizer = weakref.finalize(
            self, _close_collected, self._loop, self._client, self._log_destination
        )

    # -- the loop thread, for this package's producer and consumer wrappers --

    @property
    def closed(self) -> bool:
        return self._closed

    def get_service_info(self) -> ServiceInfo:
        """The cluster this client uses now (it changes with a failover)."""
        return self._client.get_service_info()

    def run(self, coro: Coroutine[Any, Any, _R], timeout: float | None = None) -> _R:
        """Run a coroutine on the client's loop thread and wait for its result."""
        return self._loop.run(coro, timeout)

    @property
    def submitter(self) -> Submitter:
        """What `submit` goes through (the consumers' bulk event hand-off uses it)."""
        return self._submitter

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
        **ours: Any,
    ) -> Producer:
        """A producer; `ours` takes ProducerConfiguration's options beyond the
        official ones (chunk_max_message_size, hashing_scheme)."""
        options = facade_keywords(locals(), "topic")
        check_type(str, topic, "topic")
        for name, text in (("producer_name", producer_name), ("encryption_key", encryption_key)):
            check_optional(str, text, name)
        check_optional(int, initial_sequence_id, "initial_sequence_id")
        for name, number in (
            ("send_timeout_millis", send_timeout_millis),
            ("max_pending_messages", max_pending_messages),
            ("max_pending_messages_across_partitions", max_pending_messages_across_partitions),
            ("batching_max_messages", batching_max_messages),
            ("batching_max_allowed_size_in_bytes", batching_max_allowed_size_in_bytes),
            ("batching_max_publish_delay_ms", batching_max_publish_delay_ms),
        ):
            check_type(int, number, name)
        for name, flag in (
            ("block_if_queue_full", block_if_queue_full),
            ("batching_enabled", batching_enabled),
            ("chunking_enabled", chunking_enabled),
            ("lazy_start_partitioned_producers", lazy_start_partitioned_producers),
        ):
            check_type(bool, flag, name)
        check_enum(CompressionType, compression_type, "compression_type")
        check_enum(BatchingType, batching_type, "batching_type")
        check_enum(ProducerAccessMode, access_mode, "access_mode")
        check_optional(dict, properties, "properties")
        # The blocking facade owns the pending limit (it can block the caller).
        options.update(
            max_pending_messages=0,
            max_pending_messages_across_partitions=0,
            block_if_queue_full=False,
        )
        conf = ProducerConfiguration.from_keywords(options)
        producer = self._loop.run(self._client.create_producer(topic, conf))
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
        """A consumer; `ours` takes ConsumerConfiguration's options beyond the
        official ones (priority_level, enable_retry, ack_group_time_ms,
        ack_receipt_enabled, ...).

        The message listener runs on the client's listener thread, as
        listener(consumer, message) with this module's objects.
        """
        options = facade_keywords(locals(), "topic", "subscription_name")
        if not isinstance(topic, str | list | re.Pattern):
            raise ValueError("argument topic must be a str, a list of str or a re.Pattern")
        check_type(str, subscription_name, "subscription_name")
        check_enum(ConsumerType, consumer_type, "consumer_type")
        for name, number in (
            ("receiver_queue_size", receiver_queue_size),
            (
                "max_total_receiver_queue_size_across_partitions",
                max_total_receiver_queue_size_across_partitions,
            ),
            ("broker_consumer_stats_cache_time_ms", broker_consumer_stats_cache_time_ms),
            ("negative_ack_redelivery_delay_ms", negative_ack_redelivery_delay_ms),
            ("pattern_auto_discovery_period", pattern_auto_discovery_period),
            ("max_pending_chunked_message", max_pending_chunked_message),
        ):
            check_type(int, number, name)
        check_optional(str, consumer_name, "consumer_name")
        check_optional(int, unacked_messages_timeout_ms, "unacked_messages_timeout_ms")
        for name, flag in (
            ("is_read_compacted", is_read_compacted),
            ("start_message_id_inclusive", start_message_id_inclusive),
            ("batch_index_ack_enabled", batch_index_ack_enabled),
            (
                "auto_ack_oldest_chunked_message_on_queue_full",
                auto_ack_oldest_chunked_message_on_queue_full,
            ),
        ):
            check_type(bool, flag, name)
        check_optional(dict, properties, "properties")
        check_enum(InitialPosition, initial_position, "initial_position")
        check_enum(RegexSubscriptionMode, regex_subscription_mode, "regex_subscription_mode")
        check_enum(ConsumerCryptoFailureAction, crypto_failure_action, "crypto_failure_action")
        _attach(schema, self)
        listener = None
        facade: list[Consumer] = []
        if message_listener is not None:
            user_listener = message_listener
            pool = self._listener_pool()
            cls = message_class(schema)

            def listener(_consumer: Any, msg: Any) -> Any:
                loop = self._loop.loop
                return loop.run_in_executor(pool, user_listener, facade[0], cls.of(msg))

        options["message_listener"] = listener
        conf = ConsumerConfiguration.from_keywords(options)
        consumer = self._loop.run(self._client.subscribe(topic, subscription_name, conf))
        wrapper = Consumer(self, consumer, schema)
        self._loop.run(self._install(wrapper, buffered=listener is None))
        facade.append(wrapper)
        return wrapper

    @staticmethod
    async def _install(consumer: Consumer, buffered: bool) -> None:
        consumer.install(buffered)

    def _listener_pool(self) -> concurrent.futures.ThreadPoolExecutor:
        """The message listener threads (message_listener_threads of them)."""
        if self._listeners is None:
            self._listeners = concurrent.futures.ThreadPoolExecutor(
                self._listener_threads, thread_name_prefix="magnetar-listener"
            )
        return self._listeners

    def get_schema_info(self, topic: str, version: int | None = None) -> schema.SchemaInfo:
        """The topic's schema at `version` (its latest without one), from the
        broker's registry; the official binding's Client has this call (Avro
        schemas use it to fetch a message's writer schema)."""
        wire = self._loop.run(self._client.get_schema(topic, version))
        return schema.SchemaInfo(
            int(wire.type),
            wire.name,
            wire.schema_data,
            {kv.key: kv.value for kv in wire.properties},
        )

    def get_topic_partitions(self, topic: str) -> list[str]:
        return self._loop.run(self._client.get_topic_partitions(topic))

    def get_topics_of_namespace(
        self,
        namespace: str,
        mode: RegexSubscriptionMode = RegexSubscriptionMode.PersistentOnly,
    ) -> list[str]:
        """The topics of `tenant/namespace`, a partitioned topic by its
        partitions' names, sorted (not in the official Client)."""
        return self._loop.run(self._client.get_topics_of_namespace(namespace, mode))

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
        options = facade_keywords(locals(), "topic", "start_message_id", "subscription_role_prefix")
        check_type(str, topic, "topic")
        check_type(MessageId, start_message_id, "start_message_id")
        check_type(int, receiver_queue_size, "receiver_queue_size")
        for name, text in (
            ("reader_name", reader_name),
            ("subscription_role_prefix", subscription_role_prefix),
        ):
            check_optional(str, text, name)
        check_type(bool, is_read_compacted, "is_read_compacted")
        check_type(bool, start_message_id_inclusive, "start_message_id_inclusive")
        check_enum(ConsumerCryptoFailureAction, crypto_failure_action, "crypto_failure_action")
        _attach(schema, self)
        conf = ConsumerConfiguration.from_reader_keywords(options)
        reader = self.run(
            self._client.create_reader(
                topic, start_message_id.inner, conf, subscription_role_prefix
            )
        )
        return Reader(self, reader, schema)

    def create_table_view(
        self, topic: str, subscription_name: str | None = None, schema: Any = None
    ) -> TableView:
        """The topic's latest value per key (Pulsar's TableView); returns
        once the view holds everything the topic holds now."""
        check_type(str, topic, "topic")
        check_optional(str, subscription_name, "subscription_name")
        view = self.run(self._client.create_table_view(topic, subscription_name, schema))
        return TableView(self, view, subscription_name, schema)

    def close(self) -> None:
        """Close every producer and consumer and stop the loop thread (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._finalizer.detach()
        try:
            self._loop.run(self._client.close())
        finally:
            self._loop.stop()
            if self._listeners is not None:
                self._listeners.shutdown(wait=False, cancel_futures=True)
            if self._log_destination is not None:
                self._log_destination.detach()

    def shutdown(self) -> None:
        self.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
