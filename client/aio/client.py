"""The asynchronous Client: create producers and consumers, look topics up, close."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from magnetar.client.aio.checks import check_key_reader, check_optional, check_type, parse_topic
from magnetar.client.aio.config import (
    ActiveConsumerListener,
    ConsumerConfiguration,
    MessageListener,
    ProducerConfiguration,
    wire_schema,
)
from magnetar.client.aio.consumer.consumer import Consumer
from magnetar.client.aio.consumer.multi_topic import MultiTopicsConsumer
from magnetar.client.aio.consumer.opening import ConsumerOpener, open_pattern_consumer
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
    AlreadyClosed,
    ConnectError,
    ConsumerBusy,
    InvalidConfiguration,
    from_server_error,
)
from magnetar.client.aio.net import commands
from magnetar.client.aio.net.auth import Authentication
from magnetar.client.aio.net.context import ClientContext
from magnetar.client.aio.net.failover import (
    AutoClusterFailover,
    ClusterSwitch,
    ServiceInfo,
    ServiceInfoProvider,
)
from magnetar.client.aio.net.lookup import lookup_service_for
from magnetar.client.aio.net.pool import ConnectionPool
from magnetar.client.aio.net.security import Security
from magnetar.client.aio.policies import BatchReceivePolicy, DeadLetterPolicy, KeySharedPolicy
from magnetar.client.aio.producer.partitioned import PartitionedProducer
from magnetar.client.aio.producer.producer import Producer
from magnetar.client.aio.reader.opening import open_reader
from magnetar.client.aio.reader.partitioned import PartitionedReader
from magnetar.client.aio.reader.reader import Reader
from magnetar.client.aio.reader.table_view import TableView
from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.hashes import DEFAULT_HASHING_SCHEME, HashingScheme
from magnetar.proto.ids import MessageId
from magnetar.proto.naming import TopicName

R = TypeVar("R")
AnyProducer = Producer | PartitionedProducer


class Client:
    """One client: a connection pool shared by all its producers and consumers.

    Keyword names follow `pulsar.Client`; options the official client has and
    we do not implement raise InvalidConfiguration when set rather than being
    silently ignored. A `pulsar+ssl://` or `https://` URL, or use_tls, makes
    every connection TLS.
    """

    def __init__(
        self,
        service_url: str | AutoClusterFailover | ServiceInfoProvider,
        authentication: Authentication | None = None,
        operation_timeout_seconds: float = 30,
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
        *,
        keepalive_interval_seconds: float = 30.0,
        initial_backoff_interval_ms: int = 100,
        max_backoff_interval_ms: int = 30000,
    ) -> None:
        check_optional(Authentication, authentication, "authentication")
        for name, number in (
            ("operation_timeout_seconds", operation_timeout_seconds),
            ("io_threads", io_threads),
            ("message_listener_threads", message_listener_threads),
            ("concurrent_lookup_requests", concurrent_lookup_requests),
            ("stats_interval_in_seconds", stats_interval_in_seconds),
            ("connection_timeout_ms", connection_timeout_ms),
        ):
            check_type((int, float), number, name)
        for name, value in (
            ("tls_trust_certs_file_path", tls_trust_certs_file_path),
            ("tls_private_key_file_path", tls_private_key_file_path),
            ("tls_certificate_file_path", tls_certificate_file_path),
            ("listener_name", listener_name),
            ("log_conf_file_path", log_conf_file_path),
        ):
            check_optional(str, value, name)
        for name, flag in (
            ("use_tls", use_tls),
            ("tls_allow_insecure_connection", tls_allow_insecure_connection),
            ("tls_validate_hostname", tls_validate_hostname),
        ):
            check_type(bool, flag, name)
        self._switch: ClusterSwitch | None = None
        if isinstance(service_url, AutoClusterFailover | ServiceInfoProvider):
            if authentication is not None or tls_trust_certs_file_path is not None:
                raise ValueError(
                    "with a cluster failover or service info provider, authentication and "
                    "tls_trust_certs_file_path belong to each ServiceInfo"
                )
            self._switch = ClusterSwitch(service_url, self._switch_cluster)
            info = self._switch.current
        elif isinstance(service_url, str):
            info = ServiceInfo(service_url, authentication, tls_trust_certs_file_path)
        else:
            raise ValueError("service_url must be a string, AutoClusterFailover or provider")
        self._service_info = info
        self.service_url = info.parsed
        self.operation_timeout = float(operation_timeout_seconds)
        # Every cluster's connections share these; the trust store and the
        # authentication come from the cluster's ServiceInfo.
        self._use_tls = use_tls
        self._new_security = functools.partial(
            Security,
            allow_insecure=tls_allow_insecure_connection,
            validate_hostname=tls_validate_hostname,
            certificate_file=tls_certificate_file_path,
            private_key_file=tls_private_key_file_path,
        )
        self._pool = ConnectionPool(
            connection_timeout=connection_timeout_ms / 1000.0,
            operation_timeout=self.operation_timeout,
            keepalive_interval=keepalive_interval_seconds,
            security=self._security_for(info),
        )
        self._listener_name = listener_name or ""
        lookup = lookup_service_for(
            self.service_url, self._pool, self.operation_timeout, self._listener_name
        )
        self._context = ClientContext(
            self._pool,
            lookup,
            operation_timeout=self.operation_timeout,
            backoff_initial=initial_backoff_interval_ms / 1000.0,
            backoff_max=max_backoff_interval_ms / 1000.0,
        )
        self._stats_interval = float(stats_interval_in_seconds)
        self._closed = False
        self._consumers = ConsumerOpener(
            self._context,
            self._start_endpoint,
            self._dead_letter_producer,
            self._create_subscription,
        )

    @property
    def context(self) -> ClientContext:
        return self._context

    def _check_open(self) -> None:
        if self._closed:
            raise AlreadyClosed("the client is closed")
        if self._switch is not None:
            self._switch.start(asyncio.get_running_loop())

    def _security_for(self, info: ServiceInfo) -> Security:
        return self._new_security(
            use_tls=self._use_tls or info.use_tls,
            trust_certs_file=info.tls_trust_certs_file_path,
            authentication=info.authentication,
        )

    def get_service_info(self) -> ServiceInfo:
        """The cluster this client uses now."""
        return self._switch.current if self._switch is not None else self._service_info

    async def start(self) -> None:
        """Bind the client to the running loop now (cluster probing starts);
        otherwise its first operation does."""
        self._check_open()

    async def _switch_cluster(self, info: ServiceInfo) -> None:
        """Use another cluster: new lookups and security, every connection
        dropped so producers and consumers reconnect through the new one."""
        if self._closed:
            return
        old_lookup = self._context.lookup
        self.service_url = info.parsed
        self._pool.security = self._security_for(info)
        self._context.lookup = lookup_service_for(
            info.parsed, self._pool, self.operation_timeout, self._listener_name
        )
        self._pool.drop_connections(ConnectError(f"switched to cluster {info.service_url}"))
        await old_lookup.close()

    async def _retrying(self, what: str, operation: Callable[[], Awaitable[R]]) -> R:
        return await self._context.retrying(what, operation, stop=lambda: self._closed)

    async def get_partitioned_metadata(self, topic: str | TopicName) -> int:
        name = topic if isinstance(topic, TopicName) else parse_topic(topic)
        return await self._retrying(
            f"partitioned metadata of {name}",
            lambda: self._context.lookup.get_partitioned_metadata(name),
        )

    async def get_schema(self, topic: str, version: int | None = None) -> pb.Schema:
        """The topic's schema at `version` (its latest without one) from the
        broker's registry (GET_SCHEMA); TopicNotFound when there is none."""
        self._check_open()
        name = parse_topic(topic)

        async def ask() -> pb.Schema:
            cnx = await self._context.connection_for(name)
            request_id = cnx.new_request_id()
            frame = await cnx.request(
                commands.get_schema(str(name), request_id, version), request_id
            )
            answer = frame.command.getSchemaResponse
            if answer.HasField("error_code"):
                raise from_server_error(answer.error_code, answer.error_message)
            return answer.schema

        return await self._retrying(f"schema of {name}", ask)

    async def get_topic_partitions(self, topic: str) -> list[str]:
        """The partition names of `topic`, or `[topic]` when it is not partitioned."""
        self._check_open()
        name = parse_topic(topic)
        count = await self.get_partitioned_metadata(name)
        if count <= 0:
            return [str(name)]
        return [str(name.partition(i)) for i in range(count)]

    async def get_topics_of_namespace(
        self,
        namespace: str,
        mode: RegexSubscriptionMode = RegexSubscriptionMode.PersistentOnly,
    ) -> list[str]:
        """The topics of `tenant/namespace` (a partitioned topic by its
        partitions' names), sorted; `mode` picks persistent, non-persistent or
        both, as a regex subscription's does."""
        self._check_open()
        if len(namespace.split("/")) != 2:
            raise InvalidConfiguration(f"{namespace!r} is not a namespace (tenant/namespace)")
        listed = await self._retrying(
            f"topics of {namespace}",
            lambda: self._context.lookup.get_topics_of_namespace(namespace, int(mode)),
        )
        return sorted(listed)

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
        *,
        chunk_max_message_size: int | None = None,
        hashing_scheme: HashingScheme = DEFAULT_HASHING_SCHEME,
    ) -> AnyProducer:
        """A producer.

        Batching is on by default here and off in the blocking facade
        (`magnetar.client.Client.create_producer`): deliberately, because the
        official client does the same (`pulsar.asyncio` True, `pulsar` False),
        so code moved from either API keeps its behaviour.
        """
        self._check_open()
        check_key_reader(crypto_key_reader)
        conf = ProducerConfiguration(
            producer_name=producer_name,
            initial_sequence_id=initial_sequence_id,
            send_timeout_millis=send_timeout_millis,
            compression_type=compression_type,
            max_pending_messages=max_pending_messages,
            max_pending_messages_across_partitions=max_pending_messages_across_partitions,
            block_if_queue_full=block_if_queue_full,
            batching_enabled=batching_enabled,
            batching_max_messages=batching_max_messages,
            batching_max_allowed_size_in_bytes=batching_max_allowed_size_in_bytes,
            batching_max_publish_delay_ms=batching_max_publish_delay_ms,
            encryption_keys=(encryption_key,) if encryption_key else (),
            crypto_key_reader=crypto_key_reader,
            chunking_enabled=chunking_enabled,
            message_routing_mode=message_routing_mode,
            lazy_start_partitioned_producers=lazy_start_partitioned_producers,
            properties=dict(properties or {}),
            batching_type=batching_type,
            access_mode=access_mode,
            message_router=message_router,
            chunk_max_message_size=chunk_max_message_size,
            hashing_scheme=hashing_scheme,
            schema=wire_schema(schema),
        )
        conf.validate()
        name = parse_topic(topic)
        partitions = 0
        if name.partition_index < 0:
            partitions = await self.get_partitioned_metadata(name)
        producer: AnyProducer
        if partitions > 0:
            producer = PartitionedProducer(self._context, name, conf, partitions)
        else:
            producer = Producer(self._context, name, conf, partition=name.partition_index)
        await self._start_endpoint(producer)
        return producer

    async def subscribe(
        self,
        topic: str | list[str] | re.Pattern[str],
        subscription_name: str,
        consumer_type: ConsumerType = ConsumerType.Exclusive,
        schema: Any = None,
        message_listener: MessageListener | None = None,
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
        *,
        priority_level: int = 0,
        enable_retry: bool = False,
        ack_group_time_ms: int = 100,
        ack_receipt_enabled: bool = False,
        ack_timeout_tick_time_ms: int = 1000,
        expire_time_of_incomplete_chunked_message_ms: int = 60000,
        active_consumer_listener: ActiveConsumerListener | None = None,
    ) -> Consumer | MultiTopicsConsumer:
        """A consumer on one topic or partition, or (MultiTopicsConsumer) on the
        partitions of a partitioned topic or on a list of topics.

        Keywords follow `pulsar.Client.subscribe`; those after `*` are ours
        (SEM-1 options the official Python client lacks).
        """
        self._check_open()
        if not isinstance(topic, str | list | tuple | re.Pattern):
            raise InvalidConfiguration(f"topic must be a name, a list or a regex, not {topic!r}")
        check_key_reader(crypto_key_reader)
        conf = ConsumerConfiguration(
            crypto_key_reader=crypto_key_reader,
            schema=wire_schema(schema),
            consumer_type=consumer_type,
            receiver_queue_size=receiver_queue_size,
            consumer_name=consumer_name,
            initial_position=initial_position,
            properties=dict(properties or {}),
            max_pending_chunked_message=max_pending_chunked_message,
            auto_ack_oldest_chunked_message_on_queue_full=auto_ack_oldest_chunked_message_on_queue_full,
            expire_time_of_incomplete_chunked_message_ms=expire_time_of_incomplete_chunked_message_ms,
            message_listener=message_listener,
            max_total_receiver_queue_size_across_partitions=max_total_receiver_queue_size_across_partitions,
            unacked_messages_timeout_ms=unacked_messages_timeout_ms,
            ack_timeout_tick_time_ms=ack_timeout_tick_time_ms,
            ack_group_time_ms=ack_group_time_ms,
            ack_receipt_enabled=ack_receipt_enabled,
            negative_ack_redelivery_delay_ms=negative_ack_redelivery_delay_ms,
            broker_consumer_stats_cache_time_ms=broker_consumer_stats_cache_time_ms,
            is_read_compacted=is_read_compacted,
            pattern_auto_discovery_period=pattern_auto_discovery_period,
            replicate_subscription_state_enabled=replicate_subscription_state_enabled,
            start_message_id_inclusive=start_message_id_inclusive,
            batch_receive_policy=(
                BatchReceivePolicy()
                if batch_receive_policy is None
                else BatchReceivePolicy.from_official(batch_receive_policy)
            ),
            key_shared_policy=(
                None
                if key_shared_policy is None
                else KeySharedPolicy.from_official(key_shared_policy)
            ),
            batch_index_ack_enabled=batch_index_ack_enabled,
            regex_subscription_mode=regex_subscription_mode,
            dead_letter_policy=(
                None
                if dead_letter_policy is None
                else DeadLetterPolicy.from_official(dead_letter_policy)
            ),
            crypto_failure_action=crypto_failure_action,
            priority_level=priority_level,
            enable_retry=enable_retry,
            active_consumer_listener=active_consumer_listener,
            stats_interval_seconds=self._stats_interval,
        )
        conf.validate()
        if isinstance(topic, str):
            name = parse_topic(topic)
            partitions = 0
            if name.partition_index < 0:
                partitions = await self.get_partitioned_metadata(name)
            if partitions == 0:
                return await self.subscribe_one(name, subscription_name, conf)
            names = [name.partition(i) for i in range(partitions)]
            label = str(name)
        elif isinstance(topic, list | tuple):
            names = []
            for one in topic:
                names.extend(parse_topic(p) for p in await self.get_topic_partitions(one))
            label = ",".join(str(t) for t in topic)
        else:
            return await self._subscribe_pattern(topic, subscription_name, conf)
        # SEM-1: the total across partitions bounds each one's queue.
        per_topic = max(1, conf.max_total_receiver_queue_size_across_partitions // len(names))
        if conf.receiver_queue_size > per_topic:
            conf = dataclasses.replace(conf, receiver_queue_size=per_topic)
        multi = MultiTopicsConsumer(label, subscription_name, conf)
        await multi.start(names, self.subscribe_one)
        return multi

    async def _subscribe_pattern(
        self, pattern: re.Pattern[str], subscription: str, conf: ConsumerConfiguration
    ) -> MultiTopicsConsumer:
        watch = None
        # Watchers list persistent topics only (as Pulsar's clients use them).
        persistent_only = conf.regex_subscription_mode == RegexSubscriptionMode.PersistentOnly
        if persistent_only and self.service_url.scheme == "pulsar":
            # The address is read at every (re)connection: a cluster switch moves it.
            watch = lambda: self._pool.get_connection(self.service_url.addresses[0])  # noqa: E731
        return await open_pattern_consumer(
            pattern, subscription, conf, self.get_topics_of_namespace, self.subscribe_one, watch
        )

    async def create_reader(
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
    ) -> Reader | PartitionedReader:
        """A reader of a topic, partitioned or not, or of a partition from `start_message_id`
        (MessageId.earliest / latest or a message's id)."""
        self._check_open()
        if reader_listener is not None:
            raise InvalidConfiguration("reader listeners are not supported yet")
        check_key_reader(crypto_key_reader)
        conf = ConsumerConfiguration(
            consumer_type=ConsumerType.Exclusive,
            receiver_queue_size=receiver_queue_size,
            consumer_name=reader_name,
            is_read_compacted=is_read_compacted,
            start_message_id_inclusive=start_message_id_inclusive,
            crypto_failure_action=crypto_failure_action,
            crypto_key_reader=crypto_key_reader,
            durable=False,
            start_message_id=start_message_id,
            stats_interval_seconds=self._stats_interval,
            schema=wire_schema(schema),
        )
        conf.validate()
        name = parse_topic(topic)
        partitions = 0
        if name.partition_index < 0:
            partitions = await self.get_partitioned_metadata(name)
        return await open_reader(
            self._context, name, partitions, conf, subscription_role_prefix, self._start_endpoint
        )

    async def create_table_view(
        self, topic: str, subscription_name: str | None = None, schema: Any = None
    ) -> TableView:
        """The topic's latest value per key; returns once the view holds what
        the topic held when it was called. `subscription_name` prefixes the
        view's reader subscription."""
        reader = await self.create_reader(
            topic,
            MessageId.earliest,
            schema=schema,
            subscription_role_prefix=subscription_name,
            is_read_compacted=True,
        )
        view = TableView(reader, topic, on_close=self._context.endpoints.discard)
        self._context.endpoints.add(view)
        try:
            await view.start()
        except BaseException:
            self._context.endpoints.discard(view)
            await view.close()
            raise
        return view

    async def subscribe_one(
        self, name: TopicName, subscription: str, conf: ConsumerConfiguration
    ) -> Consumer:
        """A single-topic Consumer with its dead letter handler and retry consumer (SEM-6)."""
        return await self._consumers.open(name, subscription, conf)

    async def _dead_letter_producer(self, topic: str) -> AnyProducer:
        return await self.create_producer(topic, batching_enabled=False)

    async def _create_subscription(self, topic: str, subscription: str) -> None:
        try:
            consumer = await self.subscribe(topic, subscription, receiver_queue_size=0)
        except ConsumerBusy:
            return  # someone is subscribed: the subscription exists
        await consumer.close()

    async def _start_endpoint(self, endpoint: AnyProducer | Consumer) -> None:
        """Register a producer or consumer and start it; on failure undo both."""
        self._context.endpoints.add(endpoint)
        try:
            await endpoint.start()
        except BaseException:
            self._context.endpoints.discard(endpoint)
            await endpoint.close()
            raise

    async def close(self) -> None:
        """Close every producer and consumer, then the connections (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._switch is not None:
            await self._switch.close()
        endpoints = list(self._context.endpoints)
        await asyncio.gather(*(e.close() for e in endpoints), return_exceptions=True)
        self._context.closed = True
        await self._context.lookup.close()
        await self._pool.close()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
