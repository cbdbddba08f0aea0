"""Admin v2 namespace-wide subscription operations and the namespace's bundles:
clear the backlog of every subscription (or of one) on every topic, delete a
subscription on every topic, and the same restricted to one bundle; the
bundle list (Pulsar's BundlesData), bundle unload and topicHashPositions.

As in Pulsar, these act on the topics the broker has loaded (its
getAllTopicsFromNamespaceBundle): a topic not loaded has no open cursor to
move. The backlog and delete calls are the StoredTopic / StoredSubscription
methods the per-topic routes use (clear_backlog, delete_subscription).

A standalone broker serves one bundle per namespace, 0x00000000_0xffffffff
(Pulsar standalone's default); a cluster broker has the configured count of
broker/cluster/bundles.py, and its own bundle and namespace unload routes,
registered before these (broker/server.py), answer those two paths there.
"""

from __future__ import annotations

from aiohttp import web

from magnetar.broker.admin.base import HttpError, no_content
from magnetar.broker.cluster.bundles import (
    HASH_SPACE,
    Bundle,
    bundle_of,
    bundles_of,
    parse_range,
    topic_hash,
)
from magnetar.broker.service.broker_service import BrokerService
from magnetar.broker.topics.base import StoredTopic, Topic, is_persistent
from magnetar.proto.naming import InvalidTopicName, TopicName


def bundles_data(bundles: list[Bundle]) -> dict[str, object]:
    """Pulsar's BundlesData: the ranges' boundaries, last one 0xffffffff."""
    boundaries = [f"0x{b.lower:08x}" for b in bundles] + [f"0x{HASH_SPACE - 1:08x}"]
    return {"boundaries": boundaries, "numBundles": len(bundles)}


def routes(service: BrokerService) -> list[web.RouteDef]:
    resources = service.resources

    def bundle_count() -> int:
        # Standalone owns the whole hash range as one bundle.
        return 1 if service.ownership is None else service.config.default_namespace_bundles

    async def namespace_of(request: web.Request) -> str:
        """`tenant/namespace` of the path; 404 when there is no such namespace."""
        info = request.match_info
        await resources.get_policies(info["tenant"], info["namespace"])
        return f"{info['tenant']}/{info['namespace']}"

    async def bundle_from(request: web.Request) -> Bundle:
        """The path's bundle; 412 for a range that is not one of the
        namespace's bundles (Pulsar's validateNamespaceBundleRange)."""
        namespace = await namespace_of(request)
        try:
            return parse_range(namespace, request.match_info["bundle"], bundle_count())
        except ValueError as exc:
            raise HttpError(412, f"Invalid bundle range: {exc}") from exc

    def loaded(namespace: str, bundle: Bundle | None) -> list[Topic]:
        """The open topics of the namespace (of the bundle, if given)."""
        count = bundle_count()
        return [
            t
            for t in list(service.topics.values())
            if not t.is_closed
            and t.topic_name.namespace_name == namespace
            and (bundle is None or bundle_of(t.topic_name, count) == bundle)
        ]

    def stored(topics: list[Topic]) -> list[StoredTopic]:
        # Non-persistent topics have no backlog to clear (Pulsar skips them too).
        return [t for t in topics if is_persistent(t)]

    async def clear_backlog(
        namespace: str, bundle: Bundle | None, subscription: str | None
    ) -> None:
        """Every subscription's backlog, or one subscription's where it exists
        (Pulsar fails the whole call with a 500 on a topic without it; a
        namespace-wide call means the topics that have it)."""
        for topic in stored(loaded(namespace, bundle)):
            names = topic.subscription_names()
            for name in names if subscription is None else [subscription]:
                if name in names:
                    (await topic.get_subscription(name)).clear_backlog()

    async def unsubscribe(namespace: str, bundle: Bundle | None, subscription: str) -> None:
        """Delete the subscription on every topic that has it; 412 when one
        has consumers connected, checked on all before any is deleted."""
        topics = loaded(namespace, bundle)
        for topic in topics:
            found = topic.subscriptions.get(subscription)
            if found is not None and found.consumers:
                raise HttpError(
                    412, f"Subscription has active connected consumers (on {topic.name})"
                )
        for topic in stored(topics):
            if subscription in topic.subscription_names():
                await topic.delete_subscription(subscription)

    async def clear_namespace(request: web.Request) -> web.Response:
        await clear_backlog(await namespace_of(request), None, None)
        return no_content()

    async def clear_namespace_subscription(request: web.Request) -> web.Response:
        namespace = await namespace_of(request)
        await clear_backlog(namespace, None, request.match_info["subscription"])
        return no_content()

    async def unsubscribe_namespace(request: web.Request) -> web.Response:
        namespace = await namespace_of(request)
        await unsubscribe(namespace, None, request.match_info["subscription"])
        return no_content()

    async def clear_bundle(request: web.Request) -> web.Response:
        bundle = await bundle_from(request)
        await clear_backlog(bundle.namespace, bundle, None)
        return no_content()

    async def clear_bundle_subscription(request: web.Request) -> web.Response:
        bundle = await bundle_from(request)
        await clear_backlog(bundle.namespace, bundle, request.match_info["subscription"])
        return no_content()

    async def unsubscribe_bundle(request: web.Request) -> web.Response:
        bundle = await bundle_from(request)
        await unsubscribe(bundle.namespace, bundle, request.match_info["subscription"])
        return no_content()

    async def list_bundles(request: web.Request) -> web.Response:
        namespace = await namespace_of(request)
        return web.json_response(bundles_data(bundles_of(namespace, bundle_count())))

    async def unload_bundle(request: web.Request) -> web.Response:
        """Close the bundle's loaded topics (standalone: the namespace's);
        clients are told, look them up again and load them anew."""
        bundle = await bundle_from(request)
        count = bundle_count()
        await service.unload_topics(
            lambda n: n.namespace_name == bundle.namespace and bundle_of(n, count) == bundle
        )
        return no_content()

    async def topic_hash_positions(request: web.Request) -> web.Response:
        """Pulsar's TopicHashPositions: each topic of the bundle (those named
        by `topics`, a partitioned topic's name meaning its partitions) and
        its position in the hash range."""
        bundle = await bundle_from(request)
        count = bundle_count()
        wanted: set[str] = set()
        for raw in request.query.getall("topics", []):
            try:
                wanted.add(str(TopicName.parse(raw)))
            except InvalidTopicName as exc:
                raise HttpError(412, str(exc)) from exc
        domains = ("persistent", "non-persistent")
        positions: dict[str, int] = {}
        for name in await service.topics_of_namespace(bundle.namespace, domains):
            topic = TopicName.parse(name)
            if bundle_of(topic, count) != bundle:
                continue
            if wanted and not {name, str(topic.partitioned_base)} & wanted:
                continue
            positions[name] = topic_hash(topic)
        return web.json_response(
            {
                "namespace": bundle.namespace,
                "bundle": bundle.range_name,
                "topicHashPositions": positions,
            }
        )

    ns = "/admin/v2/namespaces/{tenant}/{namespace}"
    bundle = f"{ns}/{{bundle}}"
    return [
        web.post(f"{ns}/clearBacklog", clear_namespace),
        web.post(f"{ns}/clearBacklog/{{subscription}}", clear_namespace_subscription),
        web.post(f"{ns}/unsubscribe/{{subscription}}", unsubscribe_namespace),
        web.get(f"{ns}/bundles", list_bundles),
        web.put(f"{bundle}/unload", unload_bundle),
        web.post(f"{bundle}/clearBacklog", clear_bundle),
        web.post(f"{bundle}/clearBacklog/{{subscription}}", clear_bundle_subscription),
        web.post(f"{bundle}/unsubscribe/{{subscription}}", unsubscribe_bundle),
        web.get(f"{bundle}/topicHashPositions", topic_hash_positions),
    ]
