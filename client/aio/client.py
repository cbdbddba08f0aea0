"""The asynchronous Client: create producers and consumers, look topics up, close."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import re
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from magnetar.client.aio.checks import check_optional, check_type, parse_topic
from magnetar.client.aio.config import (
    ConsumerConfiguration,
    ProducerConfiguration,
    wire_schema,
)
from magnetar.client.aio.consumer.consumer import Consumer
from magnetar.client.aio.consumer.multi_topic import MultiTopicsConsumer
from magnetar.client.aio.consumer.opening import ConsumerOpener, open_pattern_consumer
from magnetar.client.aio.enums import (
    ConsumerType,
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
from magnetar.client.aio.producer.partitioned import PartitionedProducer
from magnetar.client.aio.producer.producer import Producer
from magnetar.client.aio.reader.opening import open_reader
from magnetar.client.aio.reader.partitioned import PartitionedReader
from magnetar.client.aio.reader.reader import Reader
from magnetar.client.aio.reader.table_view import TableView
from magnetar.proto import pulsar_api_pb2 as pb
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
        self, topic: str, conf: ProducerConfiguration | None = None
    ) -> AnyProducer:
        """A producer on `topic` with `conf`'s options (ProducerConfiguration's
        defaults without one: batching on, as in `pulsar.asyncio`).

        The facades take the official keywords (`magnetar.client.Client`,
        batching off by default as in `pulsar.Client`, and
        `magnetar.client.asyncio.Client`) and make the configuration from them.
        """
        self._check_open()
        conf = dataclasses.replace(conf) if conf is not None else ProducerConfiguration()
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
        conf: ConsumerConfiguration | None = None,
    ) -> Consumer | MultiTopicsConsumer:
        """A consumer on one topic or partition, or (MultiTopicsConsumer) on the
        partitions of a partitioned topic, on a list of topics or on the topics
        a regex matches, with `conf`'s options (the facades make it from the
        official `subscribe` keywords)."""
        self._check_open()
        if not isinstance(topic, str | list | tuple | re.Pattern):
            raise InvalidConfiguration(f"topic must be a name, a list or a regex, not {topic!r}")
        conf = dataclasses.replace(
            conf if conf is not None else ConsumerConfiguration(),
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
        conf: ConsumerConfiguration | None = None,
        subscription_role_prefix: str | None = None,
    ) -> Reader | PartitionedReader:
        """A reader of a topic, partitioned or not, or of a partition from
        `start_message_id` (MessageId.earliest / latest or a message's id),
        with `conf`'s options (the facades make it from the official
        `create_reader` keywords: ConsumerConfiguration.from_reader_keywords);
        an exclusive, non-durable subscription whatever `conf` says."""
        self._check_open()
        conf = dataclasses.replace(
            conf if conf is not None else ConsumerConfiguration(),
            consumer_type=ConsumerType.Exclusive,
            durable=False,
            start_message_id=start_message_id,
            stats_interval_seconds=self._stats_interval,
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
            ConsumerConfiguration(schema=wire_schema(schema), is_read_compacted=True),
            subscription_role_prefix=subscription_name,
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
        return await self.create_producer(topic, ProducerConfiguration(batching_enabled=False))

    async def _create_subscription(self, topic: str, subscription: str) -> None:
        try:
            consumer = await self.subscribe(
                topic, subscription, ConsumerConfiguration(receiver_queue_size=0)
            )
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
