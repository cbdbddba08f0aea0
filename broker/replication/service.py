"""The broker's replicators (issue 45): one per loaded persistent topic
(each partition its own) and remote cluster its replication policy names.

BrokerService calls `update` when a topic loads and when its policies
change, `stop_topic` before it closes a topic, and `close` at shutdown; this
object owns every replicator task and awaits each one it stops. A remote is
reached at its registered cluster data (`/admin/v2/clusters/{cluster}`),
read again at each connection attempt, so an update applies at the next
retry: brokerServiceUrl for the binary protocol, serviceUrl for the admin
calls that create a partitioned topic there, and the authentication to use.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import ssl
from collections.abc import Set as AbstractSet
from functools import partial

import aiohttp
import structlog
from prometheus_client import CollectorRegistry

from magnetar.broker.features.replicated import PREFIX, is_replication_name, producer_name
from magnetar.broker.policies.rates import DispatchRate
from magnetar.broker.replication.collector import ReplicationCollector
from magnetar.broker.replication.metrics import ReplicationMetrics
from magnetar.broker.replication.remote import Credentials, RemoteError, RemoteProducer
from magnetar.broker.replication.replicator import Replicator, SchemaLookup
from magnetar.broker.replication.snapshots import ReplicatedSubscriptions, SnapshotSettings
from magnetar.broker.resources import PulsarResources, ResourceError
from magnetar.broker.storage.api import StorageError
from magnetar.broker.topics.base import StoredTopic, Topic, is_persistent
from magnetar.proto.naming import TopicName

log = structlog.get_logger(__name__)

Json = dict[str, object]


def credentials_of(cluster: str, data: Json) -> tuple[Credentials, dict[str, str]]:
    """CONNECT's credentials and the HTTP headers for a remote cluster, from
    Pulsar's authenticationPlugin / authenticationParameters (token, basic)."""
    plugin = str(data.get("authenticationPlugin") or "")
    params = str(data.get("authenticationParameters") or "")
    if not plugin and not params:
        return Credentials(), {}
    if "token" in plugin.lower() or params.startswith("token:"):
        token = params.removeprefix("token:")
        return Credentials("token", token.encode()), {"Authorization": f"Bearer {token}"}
    if "basic" in plugin.lower():
        try:
            found = json.loads(params)
            user, password = str(found["userId"]), str(found["password"])
        except (ValueError, KeyError, TypeError) as exc:
            raise RemoteError(
                f"cluster {cluster}: basic authentication needs "
                '{"userId": ..., "password": ...} parameters'
            ) from exc
        secret = f"{user}:{password}"
        header = "Basic " + base64.b64encode(secret.encode()).decode()
        return Credentials("basic", secret.encode()), {"Authorization": header}
    raise RemoteError(f"cluster {cluster}: unsupported authentication plugin {plugin!r}")


def tls_of(cluster: str, data: Json) -> ssl.SSLContext | None:
    """The TLS context for a remote reached over TLS (Pulsar's
    brokerClientTlsEnabled, or only a brokerServiceUrlTls registered), from
    its ClusterData: brokerClientTrustCertsFilePath (else the system's
    trust), tlsAllowInsecureConnection, tlsHostnameVerificationEnable (off
    by default, as Pulsar's), brokerClientCertificateFilePath /
    brokerClientKeyFilePath for a client certificate."""
    enabled = data.get("brokerClientTlsEnabled") is True or (
        not data.get("brokerServiceUrl") and bool(data.get("brokerServiceUrlTls"))
    )
    if not enabled:
        return None
    trust = data.get("brokerClientTrustCertsFilePath")
    try:
        context = ssl.create_default_context(cafile=str(trust) if trust else None)
        context.check_hostname = data.get("tlsHostnameVerificationEnable") is True
        if data.get("tlsAllowInsecureConnection") is True:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        cert, key = data.get("brokerClientCertificateFilePath"), data.get("brokerClientKeyFilePath")
        if cert:
            context.load_cert_chain(str(cert), str(key) if key else None)
    except (OSError, ssl.SSLError) as exc:
        raise RemoteError(f"cluster {cluster}: TLS settings unusable: {exc}") from exc
    return context


class Replicators:
    def __init__(
        self,
        resources: PulsarResources,
        local_cluster: str,
        registry: CollectorRegistry | None,
        *,
        schemas: SchemaLookup | None = None,
        timeout: float = 10.0,
        per_topic_metrics: bool = True,
        snapshots: SnapshotSettings | None = None,
    ) -> None:
        self._resources = resources
        self.local_cluster = local_cluster
        self._timeout = timeout
        self._schemas = schemas
        self.metrics = ReplicationMetrics(registry)
        if registry is not None:
            registry.register(
                ReplicationCollector(self.all, local_cluster, per_topic=per_topic_metrics)
            )
        # topic name -> remote cluster -> its replicator
        self._by_topic: dict[str, dict[str, Replicator]] = {}
        # topic name -> its replicated subscriptions (issue 45.4)
        self._snapshot_settings = snapshots or SnapshotSettings()
        self._subscriptions: dict[str, ReplicatedSubscriptions] = {}
        self._lock = asyncio.Lock()
        # (remote, partitioned topic, partitions) known to exist there.
        self._partitioned: set[tuple[str, str, int]] = set()

    def of(self, topic: str) -> dict[str, Replicator]:
        """The replicators of a topic, by remote cluster."""
        return dict(self._by_topic.get(topic, {}))

    def all(self) -> list[Replicator]:
        return [r for by_remote in list(self._by_topic.values()) for r in by_remote.values()]

    def update_rates(self, seconds: float) -> None:
        """The stats update's interval closed (observability/stats_update.py)."""
        for replicator in self.all():
            replicator.out.update(seconds)

    async def update(
        self, topic: Topic, clusters: frozenset[str], rate: DispatchRate | None = None
    ) -> None:
        """Start the replicators the policy names and the topic lacks; remove
        (with their cursors) those it no longer names; give each the
        topic's replicatorDispatchRate."""
        if not is_persistent(topic) or topic.is_closed:
            return
        wanted = clusters - {self.local_cluster}
        if not wanted and not self._lock.locked() and not self._has_any(topic):
            return  # nothing to start or stop: most topics, and each new one
        async with self._lock:
            current = self._by_topic.get(topic.name, {})
            if any(r.topic is not topic for r in current.values()):
                await self._stop(topic.name)  # left from an earlier load
                current = {}
            for remote in sorted(set(current) - wanted):
                await current.pop(remote).remove()
            await self._drop_stale_cursors(topic, wanted | set(current))
            for remote in sorted(wanted - set(current)):
                replicator = Replicator(
                    topic,
                    self.local_cluster,
                    remote,
                    partial(self._open, topic.topic_name, remote),
                    self.metrics,
                    self._schemas,
                )
                await replicator.start()
                current[remote] = replicator
            for replicator in current.values():
                replicator.limiter.set_rate(rate)
            if current:
                self._by_topic[topic.name] = current
                controller = self._subscriptions.get(topic.name)
                if controller is None:
                    controller = ReplicatedSubscriptions(
                        topic, self.local_cluster, self._snapshot_settings
                    )
                    controller.start()
                    self._subscriptions[topic.name] = controller
                controller.remotes = frozenset(current)
            else:
                self._by_topic.pop(topic.name, None)
                stopped = self._subscriptions.pop(topic.name, None)
                if stopped is not None:
                    await stopped.stop()

    def _has_any(self, topic: StoredTopic) -> bool:
        """Whether the topic has replicators, or cursors of ones it had."""
        name = topic.name
        return (
            name in self._by_topic
            or name in self._subscriptions
            or any(is_replication_name(cursor.name) for cursor in topic.ledger.cursors)
        )

    @staticmethod
    async def _drop_stale_cursors(topic: StoredTopic, kept: AbstractSet[str]) -> None:
        """Delete the replication cursors of remotes the policy left while
        the topic was not loaded: they would hold its ledgers for ever."""
        for cursor in list(topic.ledger.cursors):
            name = cursor.name
            if is_replication_name(name) and name.removeprefix(PREFIX) not in kept:
                with contextlib.suppress(StorageError):
                    await topic.ledger.delete_cursor(name)
                log.info("replication cursor deleted", topic=topic.name, cursor=name)

    async def stop_topic(self, name: str) -> None:
        """Stop a topic's replicators (it is closing); cursors stay."""
        async with self._lock:
            await self._stop(name)

    async def _stop(self, name: str) -> None:
        controller = self._subscriptions.pop(name, None)
        if controller is not None:
            await controller.stop()
        for replicator in self._by_topic.pop(name, {}).values():
            await replicator.stop()

    def replicated_subscriptions(self, topic: str) -> ReplicatedSubscriptions | None:
        """A topic's replicated subscriptions controller (None: no replicators)."""
        return self._subscriptions.get(topic)

    async def close(self) -> None:
        async with self._lock:
            for name in list(self._by_topic):
                await self._stop(name)

    # ------------------------------------------------------------ remotes

    async def _open(self, topic: TopicName, remote: str) -> RemoteProducer:
        """A producer for `topic` on `remote`, as its cluster data says."""
        try:
            data = await self._resources.get_cluster(remote)
        except ResourceError as exc:
            raise RemoteError(f"cluster {remote}: {exc}") from exc
        tls = tls_of(remote, data)
        field = "brokerServiceUrl" if tls is None else "brokerServiceUrlTls"
        url = data.get(field)
        if not isinstance(url, str) or not url:
            raise RemoteError(f"cluster {remote} has no {field}")
        credentials, headers = credentials_of(remote, data)
        if topic.partition_index >= 0:
            await self._ensure_partitioned(remote, data, headers, topic.partitioned_base, tls)
        return await RemoteProducer.open(
            url, str(topic), producer_name(self.local_cluster), credentials, self._timeout, tls
        )

    async def _ensure_partitioned(
        self,
        remote: str,
        data: Json,
        headers: dict[str, str],
        base: TopicName,
        tls: ssl.SSLContext | None,
    ) -> None:
        """Create the partitioned topic on the remote with as many partitions
        as here (or grow it), through its admin API, before a partition's
        producer opens there (Pulsar's replicator does the same)."""
        try:
            partitions = await self._resources.get_partitions(base)
        except ResourceError as exc:
            raise RemoteError(f"partitions of {base}: {exc}") from exc
        key = (remote, str(base), partitions)
        if partitions == 0 or key in self._partitioned:
            return
        field = "serviceUrl" if tls is None else "serviceUrlTls"
        service_url = data.get(field) or data.get("serviceUrl")
        if not isinstance(service_url, str) or not service_url:
            raise RemoteError(f"cluster {remote} has no {field} to create {base} there")
        url = f"{service_url.rstrip('/')}/admin/v2/{base.rest_path}/partitions"
        timeout = aiohttp.ClientTimeout(total=self._timeout)
        connector = aiohttp.TCPConnector(ssl=tls) if tls is not None else None
        try:
            async with aiohttp.ClientSession(
                timeout=timeout, headers=headers, connector=connector
            ) as http:
                async with http.put(url, json=partitions) as answer:
                    status, text = answer.status, await answer.text()
                if status == 409:
                    async with http.get(url) as answer:
                        found = await answer.json(content_type=None)
                    there = int(found.get("partitions", 0)) if isinstance(found, dict) else 0
                    status = 204
                    if there < partitions:
                        async with http.post(url, json=partitions) as answer:
                            status, text = answer.status, await answer.text()
                if status not in (200, 204):
                    raise RemoteError(
                        f"cluster {remote} refused to create {base} with {partitions} "
                        f"partitions: {status} {text}",
                        None,
                    )
        except (aiohttp.ClientError, ValueError) as exc:
            raise RemoteError(f"cluster {remote}: admin call for {base} failed: {exc}") from exc
        self._partitioned.add(key)
        log.info("partitioned topic ready on the remote", topic=str(base), remote_cluster=remote)
