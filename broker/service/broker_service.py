"""BrokerService: the topic registry, lookup and partitioned-topic metadata.

A standalone broker owns every topic: LOOKUP answers "connect here" with the
advertised address. In cluster mode `ownership` (broker/cluster) answers
LOOKUP from bundle ownership and a topic loads only on its bundle's owner.
Topics load on first use (creating them when allowed) and stay loaded until
the broker stops (or, in a cluster, their bundle moves). Partitioned topics are recorded in
the metadata store; PARTITIONED_METADATA answers 0 for anything else.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
from collections.abc import Callable

import structlog

from magnetar.broker.auth.authorization import AuthorizationService
from magnetar.broker.config import BrokerConfig
from magnetar.broker.eager import Done, start_eagerly
from magnetar.broker.errors import (
    BrokerServiceError,
    NotAllowedError,
    ServiceNotReadyError,
    TopicNotFoundError,
)
from magnetar.broker.observability.metrics import BrokerMetrics
from magnetar.broker.observability.stats_update import StatsUpdater
from magnetar.broker.observability.topic_metrics import TopicMetricsCollector
from magnetar.broker.policies.inactive import InactiveTopicPolicy
from magnetar.broker.policies.resolver import (
    PolicyChange,
    PolicyDefaults,
    PolicyResolver,
    TopicPolicies,
)
from magnetar.broker.replication.service import Replicators
from magnetar.broker.replication.snapshots import SnapshotSettings
from magnetar.broker.resources import (
    InvalidResource,
    PulsarResources,
    ResourceError,
    ResourceExists,
)
from magnetar.broker.service.apply import SharedPolicies, apply_policies
from magnetar.broker.service.creation import AutoCreation
from magnetar.broker.service.expiry import ExpiryMonitor
from magnetar.broker.service.inactivity import InactivitySweep
from magnetar.broker.service.lookup import LookupAnswer, Ownership
from magnetar.broker.service.prefetch import (
    WARM_UP_NAMESPACE,
    TopicPrefetch,
    hold_first_record,
)
from magnetar.broker.service.schema_registry import SchemaRegistry
from magnetar.broker.service.topic_watchers import TopicListWatchers
from magnetar.broker.storage.api import ManagedLedgerFactory, MetadataStore, Position
from magnetar.broker.storage_setup import ledger_config
from magnetar.broker.topics.base import Topic
from magnetar.broker.topics.loader import (
    TopicSettings,
    delete_topic_data,
    open_topic,
    stored_topics,
    topic_exists,
)
from magnetar.proto.errors import ServerError
from magnetar.proto.naming import InvalidName, InvalidTopicName, TopicName

log = structlog.get_logger(__name__)


def check_name(validate: Callable[[str], None], value: str) -> None:
    """Run a proto.naming validator; its refusal becomes ProducerBusy, the
    code Pulsar's broker answers a NamingException with (on SUBSCRIBE too:
    its clients turn that into InvalidConfiguration, "SubscriptionName cannot
    be empty", and do not retry)."""
    try:
        validate(value)
    except InvalidName as exc:
        raise BrokerServiceError(ServerError.ProducerBusy, str(exc)) from exc


def parse_topic(name: str) -> TopicName:
    try:
        return TopicName.parse(name)
    except InvalidTopicName as exc:
        raise BrokerServiceError(ServerError.InvalidTopicName, str(exc)) from exc


class BrokerService:
    def __init__(
        self,
        config: BrokerConfig,
        factory: ManagedLedgerFactory,
        metadata_store: MetadataStore,
        metrics: BrokerMetrics,
    ) -> None:
        self.config = config
        self.factory = factory
        self.metadata_store = metadata_store
        self.metrics = metrics
        self.topics: dict[str, Topic] = {}
        self._loading: dict[str, asyncio.Task[Topic]] = {}
        self._shared_policies = SharedPolicies()
        self.prefetch = TopicPrefetch(self._load_ahead, lambda: self.policies.changes)
        self._topic_settings = TopicSettings(
            ledger_config=ledger_config(config),
            max_read_batch_size=config.dispatcher_max_read_batch_size,
            key_shared_consistent_hashing=config.subscription_key_shared_use_consistent_hashing,
            failover_consistent_hashing=config.active_consumer_failover_consistent_hashing,
            allow_auto_subscription_creation=config.allow_auto_subscription_creation,
            dedup_snapshot_interval=config.dedup_snapshot_interval_entries,
            dedup_inactivity_seconds=config.dedup_producer_inactivity_seconds,
            compaction_dir=config.data_dir / "compacted",
        )
        self.resources = PulsarResources(metadata_store, config.cluster_name)
        self.creation = AutoCreation(self.resources, config)
        # Set when authorization is enabled (SECURITY.md).
        self.authorization: AuthorizationService | None = (
            AuthorizationService(self.resources, config.superusers())
            if config.authorization_enabled
            else None
        )
        base = self._topic_settings.ledger_config
        # Every policy a topic runs with, by topic > namespace > broker.
        self.policies = PolicyResolver(
            self.resources,
            PolicyDefaults(
                deduplication_enabled=config.broker_deduplication_enabled,
                retention=(base.retention_time_s, base.retention_size_bytes),
                max_producers=config.max_producers_per_topic,
                max_consumers=config.max_consumers_per_topic,
                max_subscriptions=config.max_subscriptions_per_topic,
                schema_validation_enforced=config.is_schema_validation_enforced,
                allow_auto_subscription_creation=config.allow_auto_subscription_creation,
                inactive_topic_policies=InactiveTopicPolicy(
                    config.broker_delete_inactive_topics_mode,
                    config.broker_delete_inactive_topics_max_inactive_duration_seconds,
                    config.broker_delete_inactive_topics_enabled,
                ),
                dedup_snapshot_interval_s=config.dedup_snapshot_interval_seconds,
                max_unacked_on_consumer=config.max_unacked_messages_per_consumer,
                max_unacked_on_subscription=config.max_unacked_messages_per_subscription,
            ),
        )
        self.policies.listen(self._policies_changed)
        self.schemas = SchemaRegistry(metadata_store, self.policies)
        # Geo-replication: each loaded topic's replicators to remote clusters.
        self.replicators = Replicators(
            self.resources,
            config.cluster_name,
            metrics.registry,
            schemas=self.schemas.get,
            per_topic_metrics=config.expose_topic_level_metrics_in_prometheus,
            snapshots=SnapshotSettings(
                frequency_s=config.replicated_subscriptions_snapshot_frequency_millis / 1000,
                timeout_s=config.replicated_subscriptions_snapshot_timeout_seconds,
                max_cached=config.replicated_subscriptions_snapshot_max_cached_per_subscription,
            ),
        )
        self._listeners = config.listeners()
        self.service_url = ""
        self.service_url_tls = ""
        # Broker-assigned producer names, Pulsar's shape: cluster, a number
        # no earlier start of a broker on this metadata store had (set in
        # start(); in cluster mode the store is shared, so no other broker
        # of the cluster has it either), a counter.
        self._name_prefix = config.cluster_name
        self._name_counter = itertools.count()
        self.is_closed = False
        # Set in cluster mode: bundle ownership decides LOOKUP and loading.
        self.ownership: Ownership | None = None
        self.expiry = ExpiryMonitor(
            lambda: self.topics.values(),
            config.message_expiry_check_interval_seconds,
            quota_interval_s=config.backlog_quota_check_interval_seconds,
            inactivity=InactivitySweep(self.policies.resolve, self.delete_topic),
        )
        self.topic_watchers = TopicListWatchers(
            lambda namespace: self.topics_of_namespace(namespace, ("persistent",))
        )
        # Rates for metrics and admin stats, from the topics' plain counters.
        self.stats_updater = StatsUpdater(
            lambda: self.topics.values(),
            config.stats_update_frequency_seconds,
            others=[self.replicators.update_rates],
        )
        # Computed when scraped, so they never drift from the registry.
        metrics.storage_writable.set_function(lambda: 0 if factory.write_error else 1)
        metrics.cache_used.set_function(lambda: factory.cache_used_bytes)
        metrics.registry.register(
            TopicMetricsCollector(
                lambda: self.topics.values(),
                config.cluster_name,
                per_topic=config.expose_topic_level_metrics_in_prometheus,
            )
        )

    def set_advertised_port(self, port: int, tls_port: int | None = None) -> None:
        host = self.config.advertised_host
        self.service_url = f"pulsar://{host}:{port}"
        # Both must be filled (WIRE 3); without a TLS listener a client on a
        # plain connection picks the plain URL anyway.
        self.service_url_tls = f"pulsar+ssl://{host}:{tls_port or port}"

    async def start(self) -> None:
        """Create what a standalone broker has on first start (cluster, tenant
        `public`, namespace `public/default`), before any client can ask."""
        host, config = self.config.advertised_host, self.config
        await self.resources.ensure_defaults(
            f"pulsar://{host}:{config.port}", f"http://{host}:{config.http_port}"
        )
        self._name_prefix = f"{config.cluster_name}-{await self.resources.next_instance_id()}"
        self.expiry.start()
        self.stats_updater.start()
        tenant, namespace = WARM_UP_NAMESPACE.split("/")
        if self.ownership is None and await self.resources.namespace_exists(tenant, namespace):
            await self.prefetch.warm_up()

    def generate_producer_name(self) -> str:
        return f"{self._name_prefix}-{next(self._name_counter)}"

    # --------------------------------------------------------------- lookup

    async def lookup(
        self, topic: str, listener_name: str = "", authoritative: bool = False
    ) -> LookupAnswer:
        """The service URLs (plain, TLS) a client should connect to for `topic`."""
        name = parse_topic(topic)
        self._check_open()
        await self.check_namespace(name)
        if self.ownership is not None:
            return await self.ownership.lookup(name, authoritative, listener_name)
        if not listener_name:
            return LookupAnswer(self.service_url, self.service_url_tls)
        url = self._listeners.get(listener_name)
        if url is None:
            # Pulsar's words: the official client recognises them and keeps
            # the connection while it retries.
            raise ServiceNotReadyError(f"the broker do not have {listener_name} listener")
        return LookupAnswer(url, url)

    async def check_namespace(self, name: TopicName) -> None:
        """TopicNotFound for a topic in a namespace that does not exist."""
        if not await self.resources.namespace_exists(name.tenant, name.namespace):
            raise TopicNotFoundError(
                f"namespace {name.namespace_name} does not exist (topic {name})"
            )

    async def partitioned_metadata(self, topic: str) -> int:
        """The partition count (0: not partitioned). With automatic creation of
        partitioned topics, an unknown topic becomes one here, as in Pulsar."""
        name = parse_topic(topic)
        if name.partition_index >= 0:
            return 0
        await self.check_namespace(name)
        try:
            partitions = await self.resources.get_partitions(name)
        except ResourceError as exc:
            raise BrokerServiceError(ServerError.MetadataError, str(exc)) from exc
        if (
            partitions == 0
            and name.persistent
            and str(name) not in self.topics
            and (creation := await self.creation.rule(name))[1] == "partitioned"
            and creation[0]
            and not await topic_exists(name, self.factory)
        ):
            partitions = creation[2]
            with contextlib.suppress(ResourceExists):
                await self.resources.create_partitioned_topic(name, partitions)
                self._topics_changed(name)
            partitions = await self.resources.get_partitions(name)
        return partitions

    async def create_partitioned_topic(self, topic: str, partitions: int) -> None:
        """Record a partitioned topic; its partitions are created on first use.
        ResourceExists when it exists, InvalidResource for a bad request."""
        name = parse_topic(topic)
        if partitions < 1:
            raise InvalidResource(
                f"a partitioned topic needs at least 1 partition, got {partitions}"
            )
        if name.partition_index >= 0:
            raise InvalidResource(f"{name} is a partition name; use the base topic name")
        await self.check_namespace(name)
        await self.resources.create_partitioned_topic(name, partitions)
        self._topics_changed(name)

    async def update_partitions(self, topic: str, partitions: int) -> None:
        """Grow a partitioned topic (Pulsar never shrinks one)."""
        name = parse_topic(topic)
        current = await self.resources.get_partitions(name)
        if current == 0:
            raise TopicNotFoundError(f"partitioned topic {name} does not exist")
        if partitions <= current:
            raise InvalidResource(f"{name} has {current} partitions; the count can only grow")
        await self.resources.update_partitions(name, partitions)
        self._topics_changed(name)

    async def delete_partitioned_topic(self, topic: str, *, force: bool = False) -> None:
        """Delete a partitioned topic and its partitions' data; refused while a
        partition has producers or consumers, unless `force` (then they are
        closed, as Pulsar's `delete -f`)."""
        name = parse_topic(topic)
        count = await self.resources.get_partitions(name)
        if count == 0:
            raise TopicNotFoundError(f"partitioned topic {name} does not exist")
        partitions = [str(name.partition(i)) for i in range(count)]
        if not force:
            for partition in partitions:
                self._check_unused(partition)
        for partition in partitions:
            await self.delete_topic(partition, force=force)
        await self.resources.delete_partitioned_topic(name)
        self._topics_changed(name)

    def _check_unused(self, topic: str) -> None:
        loaded = self.topics.get(topic)
        if loaded is None:
            return
        if loaded.producers or any(s.consumers for s in loaded.subscriptions.values()):
            raise BrokerServiceError(
                ServerError.ConsumerBusy, f"topic {topic} has connected producers or consumers"
            )

    async def delete_topic(self, topic: str, *, force: bool = False) -> None:
        """Unload a topic and delete its stored data (no error when it has none);
        `force` closes its producers and consumers instead of refusing."""
        name = parse_topic(topic)
        if not force:
            self._check_unused(str(name))
        loaded = self.topics.pop(str(name), None)
        await self.replicators.stop_topic(str(name))
        if loaded is not None:
            await loaded.close()
        await delete_topic_data(name, self.factory, self._topic_settings.compaction_dir)
        await self.resources.clear_terminated(name)
        self._topics_changed(name)

    def _topics_changed(self, name: TopicName) -> None:
        """A namespace's topic list may have changed: watchers look again."""
        self.topic_watchers.namespace_changed(f"{name.tenant}/{name.namespace}")

    async def terminate_topic(self, topic: str) -> Position:
        """Stop publishing on a persistent topic for good; its last position."""
        loaded = await self.get_topic(topic, create=False)
        last = loaded.terminate()
        # Kept in the metadata store: a restarted broker loads it terminated.
        await self.resources.set_terminated(loaded.topic_name, *last)
        log.info("topic terminated", topic=loaded.name, last=str(last))
        return last

    async def delete_known_topic(self, topic: str, *, force: bool = False) -> None:
        """The admin DELETE: TopicNotFound unless the topic is loaded or stored."""
        name = parse_topic(topic)
        if str(name) not in self.topics and not await topic_exists(name, self.factory):
            raise TopicNotFoundError(f"topic {name} does not exist")
        await self.delete_topic(str(name), force=force)

    async def namespace_topics(self, tenant: str, namespace: str) -> list[str]:
        """Every topic the broker knows in a namespace: loaded ones, stored
        persistent ones not loaded yet, and partitioned topics (as their base
        names)."""
        await self.resources.get_policies(tenant, namespace)
        found = {
            t.name
            for t in self.topics.values()
            if (t.topic_name.tenant, t.topic_name.namespace) == (tenant, namespace)
        }
        found.update(await stored_topics(tenant, namespace, self.factory))
        for domain in ("persistent", "non-persistent"):
            found.update(await self.resources.partitioned_topics(tenant, namespace, domain))
        return sorted(found)

    # --------------------------------------------------------------- topics

    async def get_topic(self, topic: str, *, create: bool = True, explicit: bool = False) -> Topic:
        """The loaded topic, loading (and if allowed creating) it on first use.
        `explicit`: an admin asked for this topic, so it is created whatever
        the automatic creation rule says (as Pulsar's admin creates it)."""
        name = parse_topic(topic)
        self._check_open()
        key = str(name)
        loaded = self.topics.get(key)
        if loaded is not None:
            return loaded
        await self.check_namespace(name)
        await self.prefetch.wait(key)
        held = await self.prefetch.take(key, create or explicit)
        if held is not None:
            return self._loaded(name, held)
        loaded = self.topics.get(key)  # loaded while the prefetch ran
        if loaded is not None:
            return loaded
        task = self._loading.get(key)
        if task is None:
            # Started here: a topic nearly always loads without waiting, and
            # then needs no task (broker/eager.py); else others share the task.
            started = start_eagerly(self._load(name, create, explicit))
            if isinstance(started, Done):
                return started.value
            task = started
            self._loading[key] = task
            task.add_done_callback(lambda _t: self._loading.pop(key, None))
        return await asyncio.shield(task)

    def prefetch_topic(self, topic: str) -> None:
        """A PARTITIONED_METADATA or LOOKUP was answered: load the topic while its
        client gets ready to attach (prefetch.py). Standalone only: in a
        cluster the answer may name another broker."""
        if self.ownership is not None or self.is_closed:
            return
        name = parse_topic(topic)
        key = str(name)
        if name.persistent and key not in self.topics and key not in self._loading:
            self.prefetch.start(name)

    async def _load_ahead(self, name: TopicName) -> Topic | None:
        """The prefetch's load: the new topic with its record held, or None
        when it existed (then loaded as any other)."""
        topic = await self._load(name, True, ahead=True)
        return None if self.topics.get(str(name)) is topic else topic

    async def _load(
        self, name: TopicName, create: bool, explicit: bool = False, ahead: bool = False
    ) -> Topic:
        seen = self.policies.changes
        policies = await self.policies.resolve(name)
        if ahead and (
            policies.max_topics_per_namespace
            or policies.replication_clusters - {self.config.cluster_name}
        ):
            # A count not to exceed, cursors to make: left to the request.
            raise ServiceNotReadyError(f"{name} is not loaded ahead")
        # A partition name stays under its partitioned topic's count.
        may_create = (explicit and name.partition_index < 0) or await self.creation.may_create(
            name, create or explicit, policies.auto_topic_creation
        )
        exists: bool | None = None
        if not may_create and not (exists := await topic_exists(name, self.factory)):
            why = " and automatic topic creation is disabled" if create else ""
            raise TopicNotFoundError(f"topic {name} does not exist{why}")
        limit = policies.max_topics_per_namespace
        if limit and name.partition_index < 0 and not exists:
            await self._check_topic_count(name, limit)
        if self.ownership is not None:
            await self.ownership.check_owner(name)
        topic = await open_topic(name, self.factory, self._settings_for(policies))
        held = ahead and hold_first_record(topic)
        try:
            await apply_policies(topic, policies, self._shared_policies)
            terminated = await self.resources.get_terminated(name)
            if terminated is not None:
                topic.terminate(Position(*terminated))
            # Changes told while it loaded missed it (it is not in
            # self.topics yet): resolve again until none came meanwhile.
            while self.policies.changes != seen:
                seen = self.policies.changes
                policies = await self.policies.resolve(name)
                await apply_policies(topic, policies, self._shared_policies)
            # Before any publish: the replication cursors start at the end.
            await self.replicators.update(
                topic, policies.replication_clusters, policies.replicator_dispatch_rate
            )
        except BaseException:
            await self._discard(topic)
            raise
        if self.is_closed:
            await self._discard(topic)
            raise ServiceNotReadyError("broker is shutting down")
        if self.ownership is not None and not self.ownership.still_owns(name):
            await self._discard(topic)
            raise ServiceNotReadyError(f"topic {name} moved to another broker while loading")
        return topic if held else self._loaded(name, topic)

    def _loaded(self, name: TopicName, topic: Topic) -> Topic:
        self.topics[str(name)] = topic
        log.info("topic loaded", topic=str(name))
        self._topics_changed(name)
        return topic

    async def _discard(self, topic: Topic) -> None:
        """Close a topic that did not finish loading."""
        await self.replicators.stop_topic(topic.name)
        await topic.close(notify_clients=False)

    def _settings_for(self, policies: TopicPolicies) -> TopicSettings:
        """The topic settings with the namespace's retention already in the
        ledger config: the first trim after opening must not go by the
        default (which keeps nothing consumed)."""
        retention = policies.configured_retention
        if retention is None:
            return self._topic_settings
        base = self._topic_settings.ledger_config
        ledger = dataclasses.replace(
            base, retention_time_s=retention[0], retention_size_bytes=retention[1]
        )
        return dataclasses.replace(self._topic_settings, ledger_config=ledger)

    async def _check_topic_count(self, name: TopicName, limit: int) -> None:
        """maxTopicsPerNamespace, before a new topic is created (partitions
        count one by one, as in Pulsar)."""
        if await topic_exists(name, self.factory):
            return
        ns = f"{name.tenant}/{name.namespace}"
        count = len(await self.topics_of_namespace(ns, ("persistent", "non-persistent")))
        if count >= limit:
            raise NotAllowedError(
                f"namespace {ns} has reached its limit of {limit} topics (maxTopicsPerNamespace)"
            )

    async def topics_of_namespace(self, namespace: str, domains: tuple[str, ...]) -> list[str]:
        """The topics of `tenant/ns` in the given domains, as Pulsar lists them:
        a partitioned topic by its partitions' names."""
        tenant, _, local = namespace.partition("/")
        if not local or "/" in local:
            raise NotAllowedError(f"{namespace!r} is not a namespace name (tenant/namespace)")
        found: set[str] = set()
        for name in await self.namespace_topics(tenant, local):
            topic = TopicName.parse(name)
            count = await self.resources.get_partitions(topic)
            if count:
                found.update(str(topic.partition(i)) for i in range(count))
            else:
                found.add(name)
        return sorted(t for t in found if t.split("://", 1)[0] in domains)

    # ------------------------------------------------------------- policies

    async def _policies_changed(self, change: PolicyChange) -> None:
        """Apply changed policies to the loaded topics they cover: producers
        already connected see them from their next SEND."""
        for topic in list(self.topics.values()):
            if change.covers(topic.topic_name):
                policies = await self.policies.resolve(topic.topic_name)
                await apply_policies(topic, policies, self._shared_policies)
                await self.replicators.update(
                    topic, policies.replication_clusters, policies.replicator_dispatch_rate
                )

    async def unload_topics(self, select: Callable[[TopicName], bool]) -> int:
        """Close the loaded topics `select` picks (their bundle moves away):
        clients are told and look the topics up again. Returns how many."""
        chosen = [t for t in self.topics.values() if select(t.topic_name)]
        for topic in chosen:
            if self.topics.get(topic.name) is topic:
                del self.topics[topic.name]
            await self.replicators.stop_topic(topic.name)
        results = await asyncio.gather(*(t.close() for t in chosen), return_exceptions=True)
        for topic, result in zip(chosen, results, strict=True):
            if isinstance(result, BaseException):
                log.warning("unloading topic failed", topic=topic.name, error=repr(result))
        return len(chosen)

    # ------------------------------------------------------------ lifecycle

    def _check_open(self) -> None:
        if self.is_closed:
            raise ServiceNotReadyError("broker is shutting down")

    async def close(self) -> None:
        """Close every topic: clients are told, cursors persisted, ledgers synced."""
        if self.is_closed:
            return
        self.is_closed = True
        await self.expiry.stop()
        await self.topic_watchers.stop()
        await self.stats_updater.stop()
        await self.prefetch.close()
        for task in list(self._loading.values()):
            task.cancel()
        await asyncio.gather(*self._loading.values(), return_exceptions=True)
        await self.replicators.close()
        topics = list(self.topics.values())
        self.topics.clear()
        results = await asyncio.gather(*(t.close() for t in topics), return_exceptions=True)
        for topic, result in zip(topics, results, strict=True):
            if isinstance(result, BaseException):
                log.warning("closing topic failed", topic=topic.name, error=repr(result))
