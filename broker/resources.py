"""Clusters, tenants, namespaces and partitioned topics as metadata (Pulsar's
PulsarResources), kept in the metadata store under Pulsar's own paths.

Values are JSON documents in Pulsar's admin shapes (TenantInfo, Policies,
PartitionedTopicMetadata), so what the admin API stores is what it returns.
Every method raises a ResourceError subclass the admin layer maps to an HTTP
status and the wire layer to a ServerError.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from magnetar.broker.storage.api import (
    BadVersion,
    MetadataStore,
    NotEmpty,
    NotFound,
    Notification,
)
from magnetar.proto.naming import TopicName

CLUSTERS = "/admin/clusters"
POLICIES = "/admin/policies"
PARTITIONED_TOPICS = "/admin/partitioned-topics"
TOPIC_POLICIES = "/admin/topic-policies"
# Magnetar's own: where each terminated topic (or partition) stopped.
TERMINATED = "/magnetar/terminated"
# Magnetar's own: how many times a broker of this store has started.
INSTANCE_COUNTER = "/magnetar/broker-starts"

Json = dict[str, Any]


class ResourceError(Exception):
    """A metadata operation refused; the message is for humans."""


class ResourceNotFound(ResourceError):
    pass


class ResourceExists(ResourceError):
    pass


class ResourceBusy(ResourceError):
    """The resource still has children (a tenant's namespaces, a namespace's topics)."""


class InvalidResource(ResourceError):
    """The request names or describes a resource that cannot exist."""


def _check_name(kind: str, name: str) -> None:
    # Pulsar's rule for tenant, namespace and cluster names.
    if not name or not all(c.isalnum() or c in "-_.=:" for c in name) or name in (".", ".."):
        raise InvalidResource(f"invalid {kind} name {name!r}")


# ClusterData's URLs (Pulsar's field names) and the schemes each takes.
_CLUSTER_URLS = {
    "serviceUrl": ("http://",),
    "serviceUrlTls": ("https://",),
    "brokerServiceUrl": ("pulsar://",),
    "brokerServiceUrlTls": ("pulsar+ssl://",),
}


def _check_cluster_data(data: Json) -> None:
    """The URLs a remote cluster is reached at (geo-replication) are strings
    of their scheme; the authentication fields are strings."""
    for key, schemes in _CLUSTER_URLS.items():
        value = data.get(key)
        if value in (None, ""):
            continue
        if not isinstance(value, str) or not value.startswith(schemes):
            raise InvalidResource(f"{key} must be a {schemes[0]} URL, got {value!r}")
    for key in ("authenticationPlugin", "authenticationParameters"):
        if not isinstance(data.get(key, ""), str):
            raise InvalidResource(f"{key} must be a string")


def _topic_policies_path(topic: TopicName) -> str:
    base = topic.partitioned_base if topic.partition_index >= 0 else topic
    return f"{TOPIC_POLICIES}/{base.tenant}/{base.namespace}/{base.domain}/{base.local_name}"


def _terminated_path(topic: TopicName) -> str:
    return f"{TERMINATED}/{topic.tenant}/{topic.namespace}/{topic.domain}/{topic.local_name}"


def partitioned_topic_path(topic: TopicName) -> str:
    return (
        f"{PARTITIONED_TOPICS}/{topic.tenant}/{topic.namespace}/{topic.domain}/{topic.local_name}"
    )


# Cached reads kept at most (a topic's policies, its terminated mark, ...).
_CACHE_LIMIT = 200_000


class PulsarResources:
    def __init__(self, store: MetadataStore, cluster: str) -> None:
        self.store = store
        self.cluster = cluster
        # Pulsar's MetadataCache: values read, dropped on a change notification.
        # Only where the store hears of every change (the embedded one); with
        # etcd another broker's write would leave this copy stale.
        self._cache: dict[str, bytes | None] | None = None
        # Reads under way, each with its token; a change to the path drops
        # the token, and that read's value is not cached (it may be older).
        self._reading: dict[str, object] = {}
        if store.sees_every_change:
            self._cache = {}
            store.register_listener(self._changed)

    def _changed(self, note: Notification) -> None:
        if self._cache is not None:
            self._cache.pop(note.path, None)
            self._reading.pop(note.path, None)

    async def _get_raw(self, path: str) -> bytes | None:
        cache = self._cache
        if cache is None:
            got = await self.store.get(path)
            return None if got is None else got.value
        if path in cache:
            return cache[path]
        # A node's parent exists while it does (the store creates parents
        # and refuses to delete one with children): under a parent known to
        # be absent, nothing is. A new topic's partitioned, topic-policies
        # and terminated nodes are looked up that way, without a read each
        # (three of the four reads per new topic, issue 43); the parent's
        # creation is notified, which drops it from the cache.
        parent = path.rpartition("/")[0]
        if parent.count("/") > 2 and await self._read_cached(parent) is None:
            return None
        return await self._read_cached(path)

    async def _read_cached(self, path: str) -> bytes | None:
        cache = self._cache
        assert cache is not None
        if path in cache:
            return cache[path]
        token = self._reading[path] = object()
        try:
            got = await self.store.get(path)
        finally:
            unchanged = self._reading.get(path) is token
            if unchanged:
                del self._reading[path]
        value = None if got is None else got.value
        if unchanged:  # no change to the path while we read
            if len(cache) >= _CACHE_LIMIT:
                cache.clear()
            cache[path] = value
        return value

    async def _get_json(self, path: str) -> Json | None:
        raw = await self._get_raw(path)
        if raw is None:
            return None
        if not raw or raw == b"{}":
            return {}  # a namespace without policies: read three times per new topic
        value = json.loads(raw)
        return value if isinstance(value, dict) else {"value": value}

    async def _create(self, path: str, value: Json, conflict: str) -> None:
        """Store a new document; `conflict` is Pulsar's 409 text when it exists
        (clients and scripts match on those texts to tolerate leftovers)."""
        try:
            await self.store.put(path, json.dumps(value).encode(), expected_version=-1)
        except BadVersion as exc:
            raise ResourceExists(conflict) from exc

    async def next_instance_id(self) -> int:
        """A number no earlier start of a broker on this metadata store got
        (Pulsar's distributed id for producer names): 0 on the first start."""
        while True:
            got = await self.store.get(INSTANCE_COUNTER)
            current = -1 if got is None else int(got.value)
            try:
                await self.store.put(
                    INSTANCE_COUNTER,
                    str(current + 1).encode(),
                    expected_version=-1 if got is None else got.stat.version,
                )
            except BadVersion:
                continue  # another broker of the cluster started at the same time
            return current + 1

    # -------------------------------------------------------------- clusters

    async def ensure_defaults(self, service_url: str, web_url: str) -> None:
        """What a standalone broker creates on first start: its cluster, the
        tenant `public` and the namespace `public/default`."""
        # Brokers of a cluster start together: another may create them first.
        if not await self.store.exists(f"{CLUSTERS}/{self.cluster}"):
            with contextlib.suppress(ResourceExists):
                await self.put_cluster(
                    self.cluster, {"serviceUrl": web_url, "brokerServiceUrl": service_url}
                )
        if not await self.store.exists(f"{POLICIES}/public"):
            with contextlib.suppress(ResourceExists):
                # As Pulsar's standalone: the tenant may use its cluster.
                allowed = [self.cluster]
                await self.create_tenant("public", {"adminRoles": [], "allowedClusters": allowed})
        if not await self.store.exists(f"{POLICIES}/public/default"):
            with contextlib.suppress(ResourceExists):
                await self.create_namespace("public", "default", {})
        await self.warm_namespace("public", "default")

    async def warm_namespace(self, tenant: str, namespace: str) -> None:
        """Read into the cache what creating a topic of the namespace reads
        first: its policies and the parents of its topics' own nodes (their
        absence answers for each new topic, see _get_raw). On a fresh
        broker the first topic otherwise paid for these cold reads."""
        if self._cache is None:
            return
        below = f"{tenant}/{namespace}/persistent"
        for path in (
            f"{POLICIES}/{tenant}/{namespace}",
            f"{PARTITIONED_TOPICS}/{below}",
            f"{TOPIC_POLICIES}/{below}",
            f"{TERMINATED}/{below}",
        ):
            await self._read_cached(path)

    async def clusters(self) -> list[str]:
        return await self.store.get_children(CLUSTERS)

    async def get_cluster(self, name: str) -> Json:
        data = await self._get_json(f"{CLUSTERS}/{name}")
        if data is None:
            raise ResourceNotFound(f"cluster {name} does not exist")
        return data

    async def put_cluster(self, name: str, data: Json) -> None:
        _check_name("cluster", name)
        _check_cluster_data(data)
        await self._create(f"{CLUSTERS}/{name}", data, "Cluster already exists")

    async def update_cluster(self, name: str, data: Json) -> None:
        await self.get_cluster(name)
        _check_cluster_data(data)
        await self.store.put(f"{CLUSTERS}/{name}", json.dumps(data).encode())

    async def delete_cluster(self, name: str) -> None:
        """ResourceBusy while the brokers run it or a tenant may use it."""
        await self.get_cluster(name)
        if name == self.cluster:
            raise ResourceBusy(f"cluster {name} is the cluster these brokers serve")
        for tenant in await self.tenants():
            if name in ((await self.get_tenant(tenant)).get("allowedClusters") or []):
                raise ResourceBusy(f"cluster {name} is still allowed for tenant {tenant}")
        try:
            await self.store.delete(f"{CLUSTERS}/{name}")
        except NotFound as exc:
            raise ResourceNotFound(f"cluster {name} does not exist") from exc

    # --------------------------------------------------------------- tenants

    async def tenants(self) -> list[str]:
        return await self.store.get_children(POLICIES)

    async def get_tenant(self, tenant: str) -> Json:
        data = await self._get_json(f"{POLICIES}/{tenant}")
        if data is None:
            raise ResourceNotFound(f"tenant {tenant} does not exist")
        return data

    async def _check_clusters(self, info: Json) -> None:
        wanted = info.get("allowedClusters") or []
        if not isinstance(wanted, list):
            raise InvalidResource("allowedClusters must be a list")
        known = set(await self.clusters())
        unknown = [c for c in wanted if c not in known]
        if unknown:
            raise InvalidResource(f"clusters do not exist: {', '.join(map(str, unknown))}")

    async def create_tenant(self, tenant: str, info: Json) -> None:
        _check_name("tenant", tenant)
        await self._check_clusters(info)
        info = {"adminRoles": [], "allowedClusters": [], **info}
        await self._create(f"{POLICIES}/{tenant}", info, "Tenant already exists")

    async def update_tenant(self, tenant: str, info: Json) -> None:
        current = await self.get_tenant(tenant)
        await self._check_clusters(info)
        merged = {**current, **info}
        await self.store.put(f"{POLICIES}/{tenant}", json.dumps(merged).encode())

    async def delete_tenant(self, tenant: str) -> None:
        await self.get_tenant(tenant)
        if await self.store.get_children(f"{POLICIES}/{tenant}"):
            raise ResourceBusy(f"tenant {tenant} still has namespaces")
        try:
            await self.store.delete(f"{POLICIES}/{tenant}")
        except NotFound as exc:
            raise ResourceNotFound(f"tenant {tenant} does not exist") from exc
        except NotEmpty as exc:
            raise ResourceBusy(f"tenant {tenant} still has namespaces") from exc

    # ------------------------------------------------------------ namespaces

    async def namespaces(self, tenant: str) -> list[str]:
        await self.get_tenant(tenant)
        return [f"{tenant}/{ns}" for ns in await self.store.get_children(f"{POLICIES}/{tenant}")]

    async def namespace_exists(self, tenant: str, namespace: str) -> bool:
        return await self._get_raw(f"{POLICIES}/{tenant}/{namespace}") is not None

    async def get_policies(self, tenant: str, namespace: str) -> Json:
        data = await self._get_json(f"{POLICIES}/{tenant}/{namespace}")
        if data is None:
            raise ResourceNotFound(f"namespace {tenant}/{namespace} does not exist")
        return data

    async def create_namespace(self, tenant: str, namespace: str, policies: Json) -> None:
        _check_name("namespace", namespace)
        await self.get_tenant(tenant)
        await self._create(f"{POLICIES}/{tenant}/{namespace}", policies, "Namespace already exists")

    async def set_policies(self, tenant: str, namespace: str, policies: Json) -> None:
        await self.get_policies(tenant, namespace)
        await self.store.put(f"{POLICIES}/{tenant}/{namespace}", json.dumps(policies).encode())

    async def delete_namespace(self, tenant: str, namespace: str) -> None:
        await self.get_policies(tenant, namespace)
        await self.store.delete(f"{POLICIES}/{tenant}/{namespace}")

    async def set_policy(self, tenant: str, namespace: str, key: str, value: object) -> None:
        """Set (or, with None, remove) one namespace policy."""
        policies = await self.get_policies(tenant, namespace)
        if value is None:
            policies.pop(key, None)
        else:
            policies[key] = value
        await self.store.put(f"{POLICIES}/{tenant}/{namespace}", json.dumps(policies).encode())

    # --------------------------------------------------------- topic policies

    async def get_topic_policies(self, topic: TopicName) -> Json:
        """A topic's own policies (partitions share their partitioned topic's)."""
        return await self._get_json(_topic_policies_path(topic)) or {}

    async def set_topic_policy(self, topic: TopicName, key: str, value: object) -> None:
        policies = await self.get_topic_policies(topic)
        if value is None:
            policies.pop(key, None)
        else:
            policies[key] = value
        await self.store.put(_topic_policies_path(topic), json.dumps(policies).encode())

    # ------------------------------------------------------- terminated topics

    async def get_terminated(self, topic: TopicName) -> tuple[int, int] | None:
        """The last position of a terminated topic; None while it is open."""
        data = await self._get_json(_terminated_path(topic))
        if data is None:
            return None
        return int(data["ledgerId"]), int(data["entryId"])

    async def set_terminated(self, topic: TopicName, ledger_id: int, entry_id: int) -> None:
        body = {"ledgerId": ledger_id, "entryId": entry_id}
        await self.store.put(_terminated_path(topic), json.dumps(body).encode())

    async def clear_terminated(self, topic: TopicName) -> None:
        """The topic is deleted: a new one of that name starts open."""
        with contextlib.suppress(NotFound):
            await self.store.delete(_terminated_path(topic))

    # ---------------------------------------------------- partitioned topics

    async def get_partitions(self, topic: TopicName) -> int:
        """The partition count; 0 for a topic that is not partitioned."""
        data = await self._get_json(partitioned_topic_path(topic))
        if data is None:
            return 0
        try:
            return int(data["partitions"])
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidResource(f"corrupt partitioned metadata for {topic}: {exc}") from exc

    async def create_partitioned_topic(self, topic: TopicName, partitions: int) -> None:
        await self._create(
            partitioned_topic_path(topic),
            {"partitions": partitions},
            "Partitioned topic already exists",
        )

    async def update_partitions(self, topic: TopicName, partitions: int) -> None:
        await self.store.put(
            partitioned_topic_path(topic), json.dumps({"partitions": partitions}).encode()
        )

    async def delete_partitioned_topic(self, topic: TopicName) -> None:
        try:
            await self.store.delete(partitioned_topic_path(topic))
        except NotFound as exc:
            raise ResourceNotFound(f"partitioned topic {topic} does not exist") from exc

    async def partitioned_topics(self, tenant: str, namespace: str, domain: str) -> list[str]:
        path = f"{PARTITIONED_TOPICS}/{tenant}/{namespace}/{domain}"
        return [
            f"{domain}://{tenant}/{namespace}/{name}"
            for name in await self.store.get_children(path)
        ]
