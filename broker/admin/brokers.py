"""Admin v2 for the broker itself (Pulsar's `brokers` and `broker-stats`):
the active brokers and the leader, the version, the configuration (dynamic
names and values, the runtime map, the internal configuration data), a
backlog quota check on demand, the namespaces this broker owns, and the
per-topic stats and metrics of what it serves.

A standalone broker is its whole cluster: it is the only active broker and
the leader, and it owns each namespace it has topics of as one bundle (the
full hash range). Those four answers are standalone-only; a cluster broker
serves its own (cluster.py). Broker ids are Pulsar's:
advertised host and web service port. Every answer is per broker, so
nothing here asks another broker.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import re
from typing import Any

from aiohttp import web
from prometheus_client.metrics import MetricWrapperBase

from magnetar.broker.admin.base import HttpError, no_content
from magnetar.broker.admin.subscriptions import topic_stats, traffic_stats
from magnetar.broker.cluster.bundles import bundle_of
from magnetar.broker.config import BrokerConfig
from magnetar.broker.counters import rate_stats
from magnetar.broker.dispatchers.consumer import Consumer
from magnetar.broker.observability.topic_metrics import TopicSample, sample_topic
from magnetar.broker.resources import ResourceNotFound
from magnetar.broker.service.broker_service import BrokerService
from magnetar.broker.storage_setup import METADATA_FILE
from magnetar.broker.topics.base import Topic, is_persistent
from magnetar.proto.naming import TopicName

# Settings whose values are, or point at, credentials: never shown. By name
# pattern, so a secret setting added later stays hidden without a change here.
_SECRET_SETTING = re.compile(r"secret|password|passwd|_key$|key_file|credential|token")
# Cluster names Pulsar never redirects for.
_GLOBAL_CLUSTER = "global"


def magnetar_version() -> str:
    """The installed package's version (what `brokers/version` answers)."""
    try:
        return importlib.metadata.version("magnetar")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def without_credentials(value: str) -> str:
    """A URL with any user:password@ part removed (other text unchanged)."""
    scheme, sep, rest = value.partition("://")
    if not sep:
        return value
    netloc, slash, path = rest.partition("/")
    return f"{scheme}://{netloc.rpartition('@')[2]}{slash}{path}"


def _setting_text(value: object) -> str:
    # Java's spelling of booleans, as Pulsar's string map has them.
    if isinstance(value, bool):
        return "true" if value else "false"
    return without_credentials(str(value))


def runtime_configuration(config: BrokerConfig) -> dict[str, str]:
    """Every setting the broker runs with, as text (Pulsar's runtime
    configuration map), secrets left out. Names are Magnetar's setting keys:
    the ones its TOML file, environment and command line accept."""
    return {
        f.name: _setting_text(getattr(config, f.name))
        for f in dataclasses.fields(config)
        if not _SECRET_SETTING.search(f.name)
    }


def metadata_store_url(config: BrokerConfig) -> str:
    """Where the metadata lives: etcd in cluster mode, else the embedded
    SQLite file in the data directory."""
    if config.metadata_url:
        return without_credentials(config.metadata_url)
    return f"sqlite://{(config.data_dir / METADATA_FILE).absolute()}"


def internal_configuration(config: BrokerConfig) -> dict[str, str | None]:
    """Pulsar's InternalConfigurationData. One store holds both the local and
    the configuration metadata; the deprecated ZooKeeper names carry the same
    URLs, as Pulsar fills them; no BookKeeper and no state storage here."""
    url = metadata_store_url(config)
    return {
        "metadataStoreUrl": url,
        "configurationMetadataStoreUrl": url,
        "zookeeperServers": url,
        "configurationStoreServers": url,
        "ledgersRootPath": None,
        "bookkeeperMetadataServiceUri": None,
        "stateStorageServiceUrl": None,
    }


def _consumer_entry(consumer: Consumer) -> dict[str, Any]:
    return {
        "consumerName": consumer.name,
        "availablePermits": consumer.permits,
        "unackedMessages": consumer.unacked_messages,
        **rate_stats(consumer.dispatched, "Out", totals=False),
        "address": str(consumer.address),
        "clientVersion": consumer.cnx.client_version,
    }


def live_topic_stats(topic: Topic) -> dict[str, Any]:
    """The TopicStats fields a topic without storage has (non-persistent:
    the admin's per-topic stats serve persistent topics only)."""
    subscriptions: dict[str, Any] = {}
    for name, sub in list(topic.subscriptions.items()):
        stats = sub.stats()
        subscriptions[name] = {
            "msgBacklog": stats.msg_backlog,
            "type": stats.type_name,
            **rate_stats(sub.dispatched, "Out", totals=False),
            "msgRateRedeliver": sub.redelivered.msg_rate,
            "unackedMessages": sub.unacked_messages,
            "msgDropped": stats.msg_dropped,
            "consumers": [_consumer_entry(c) for c in sub.consumers],
        }
    return {**traffic_stats(topic), "subscriptions": subscriptions}


def streamed_topic_stats(stats: dict[str, Any]) -> dict[str, Any]:
    """One topic as broker-stats/topics writes it (Pulsar's streamed stats:
    counters named *Count, a producer count, the average message size);
    storage fields only for a persistent topic, as Pulsar's."""
    rate_in, throughput_in = stats["msgRateIn"], stats["msgThroughputIn"]
    entry: dict[str, Any] = {
        "publishers": stats["publishers"],
        "replication": {},  # no geo-replication yet
        "subscriptions": stats["subscriptions"],
        "producerCount": len(stats["publishers"]),
        "averageMsgSize": throughput_in / rate_in if rate_in else 0.0,
        "msgRateIn": rate_in,
        "msgRateOut": stats["msgRateOut"],
        "msgInCount": stats["msgInCounter"],
        "bytesInCount": stats["bytesInCounter"],
        "msgOutCount": stats["msgOutCounter"],
        "bytesOutCount": stats["bytesOutCounter"],
        "msgThroughputIn": throughput_in,
        "msgThroughputOut": stats["msgThroughputOut"],
    }
    for key in ("storageSize", "backlogSize"):
        if key in stats:
            entry[key] = stats[key]
    return entry


def namespace_metrics(namespace: str, sample: TopicSample) -> dict[str, Any]:
    """Pulsar's per-namespace Metrics object (NamespaceStats' brk_* names)."""
    return {
        "metrics": {
            "brk_in_rate": sample.rate_in,
            "brk_in_tp_rate": sample.throughput_in,
            "brk_out_rate": sample.rate_out,
            "brk_out_tp_rate": sample.throughput_out,
            "brk_storage_size": sample.storage_size,
            "brk_no_of_producers": sample.producers,
            "brk_no_of_subscriptions": sample.subscriptions,
            "brk_no_of_replicators": 0,
            "brk_no_of_consumers": sample.consumers,
            "brk_msg_backlog": sample.msg_backlog,
            "brk_replication_backlog": 0,
        },
        "dimensions": {"namespace": namespace},
    }


def _sample_value(metric: MetricWrapperBase, sample_name: str) -> float:
    """A prometheus metric's current value, through its public collect()."""
    for family in metric.collect():
        for sample in family.samples:
            if sample.name == sample_name:
                return float(sample.value)
    return 0.0


def routes(service: BrokerService) -> list[web.RouteDef]:
    config = service.config
    resources = service.resources
    standalone = service.ownership is None

    def broker_id(request: web.Request) -> str:
        """This broker's id, as Pulsar forms it: advertised host and web port.
        A broker bound to port 0 (tests) has the port this request came to."""
        port = config.http_port
        if port == 0 and request.transport is not None:
            sockname = request.transport.get_extra_info("sockname")
            if isinstance(sockname, tuple) and len(sockname) >= 2:
                port = int(sockname[1])
        return f"{config.advertised_host}:{port}"

    async def check_cluster(request: web.Request, cluster: str) -> None:
        """Pulsar's cluster ownership check: with authorization on, another
        cluster's request is redirected (307) to that cluster's web service,
        and an unknown one is 404; without it any cluster name is accepted."""
        if cluster in (config.cluster_name, _GLOBAL_CLUSTER) or service.authorization is None:
            return
        try:
            data = await resources.get_cluster(cluster)
        except ResourceNotFound as exc:
            raise HttpError(404, f"Cluster does not exist: cluster={cluster}") from exc
        url = data.get("serviceUrl")
        if request.secure and data.get("serviceUrlTls"):
            url = data["serviceUrlTls"]
        if not isinstance(url, str) or "://" not in url:
            raise HttpError(412, f"cluster {cluster} has no web service URL to redirect to")
        raise web.HTTPTemporaryRedirect(url.rstrip("/") + request.path_qs)

    async def version(_request: web.Request) -> web.Response:
        # Pulsar answers the bare version string, not a JSON document.
        return web.Response(text=magnetar_version(), content_type="text/plain")

    async def dynamic_names(_request: web.Request) -> web.Response:
        # No setting changes while the broker runs: none is dynamic.
        return web.json_response([])

    async def dynamic_values(_request: web.Request) -> web.Response:
        return web.json_response({})

    async def runtime(_request: web.Request) -> web.Response:
        return web.json_response(runtime_configuration(config))

    async def internal(_request: web.Request) -> web.Response:
        return web.json_response(internal_configuration(config))

    async def backlog_quota_check(_request: web.Request) -> web.Response:
        """The periodic backlog quota check, now (eviction, and producers
        over a blocking quota disconnected); 204 once it has run."""
        await service.expiry.check_backlog_quotas()
        return no_content()

    async def topic_entries(topic: Topic) -> dict[str, Any]:
        if is_persistent(topic):
            return streamed_topic_stats(await topic_stats(topic))
        return streamed_topic_stats(live_topic_stats(topic))

    def bundle_range(name: TopicName) -> str:
        # A cluster splits namespaces into bundles; standalone has one each.
        count = 1 if standalone else config.default_namespace_bundles
        return bundle_of(name, count).range_name

    async def broker_topics(_request: web.Request) -> web.Response:
        """namespace -> bundle -> domain -> topic -> stats, for every topic
        this broker has loaded (Pulsar's broker-stats/topics)."""
        found: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
        for topic in list(service.topics.values()):
            if topic.is_closed:
                continue
            name = topic.topic_name
            domains = found.setdefault(name.namespace_name, {}).setdefault(bundle_range(name), {})
            domains.setdefault(name.domain, {})[topic.name] = await topic_entries(topic)
        return web.json_response(found)

    async def broker_metrics(_request: web.Request) -> web.Response:
        """Pulsar's list of Metrics: one per namespace of the loaded topics,
        summed from the same samples /metrics reads, and the connections."""
        per_namespace: dict[str, TopicSample] = {}
        for topic in list(service.topics.values()):
            sample, _subscriptions = sample_topic(topic)
            per_namespace.setdefault(topic.topic_name.namespace_name, TopicSample()).add(sample)
        found = [namespace_metrics(ns, s) for ns, s in sorted(per_namespace.items())]
        counted = service.metrics
        opened = int(_sample_value(counted.connections_opened, "magnetar_connections_opened_total"))
        active = int(_sample_value(counted.connections, "pulsar_active_connections"))
        found.append(
            {
                "metrics": {
                    "brk_connection_created_total_count": opened,
                    "brk_connection_closed_total_count": max(opened - active, 0),
                    "brk_active_connections": active,
                },
                "dimensions": {
                    "broker": config.advertised_host,
                    "cluster": config.cluster_name,
                    "metric": "broker_connection",
                },
            }
        )
        return web.json_response(found)

    async def active_brokers(request: web.Request) -> web.Response:
        return web.json_response([broker_id(request)])

    async def cluster_brokers(request: web.Request) -> web.Response:
        await check_cluster(request, request.match_info["cluster"])
        return web.json_response([broker_id(request)])

    async def leader(request: web.Request) -> web.Response:
        me = broker_id(request)
        return web.json_response({"serviceUrl": f"http://{me}", "brokerId": me})

    async def owned_namespaces(request: web.Request) -> web.Response:
        """Pulsar's NamespaceOwnershipStatus of each bundle this broker owns:
        here, each namespace it has loaded topics of, as its one bundle."""
        info = request.match_info
        wanted = re.sub(r"^https?://", "", info["broker"])
        if wanted != broker_id(request):
            raise HttpError(404, f"Broker id '{info['broker']}' not found in available brokers.")
        await check_cluster(request, info["cluster"])
        owned = {
            f"{t.topic_name.namespace_name}/{bundle_range(t.topic_name)}": {
                "broker_assignment": "shared",
                "is_controlled": False,
                "is_active": True,
            }
            for t in list(service.topics.values())
            if not t.is_closed
        }
        return web.json_response(dict(sorted(owned.items())))

    base = "/admin/v2/brokers"
    # Plain paths first: on a router that matches in order, {cluster} would
    # take them.
    found = [
        web.get(f"{base}/version", version),
        web.get(f"{base}/configuration", dynamic_names),
        web.get(f"{base}/configuration/values", dynamic_values),
        web.get(f"{base}/configuration/runtime", runtime),
        web.get(f"{base}/internal-configuration", internal),
        web.get(f"{base}/backlog-quota-check", backlog_quota_check),
        web.get("/admin/v2/broker-stats/topics", broker_topics),
        web.get("/admin/v2/broker-stats/metrics", broker_metrics),
    ]
    if standalone:
        found += [
            web.get(base, active_brokers),
            web.get(f"{base}/leaderBroker", leader),
            web.get(f"{base}/{{cluster}}", cluster_brokers),
            web.get(f"{base}/{{cluster}}/{{broker}}/ownedNamespaces", owned_namespaces),
        ]
    return found
