"""Cluster admin routes: bundle unload (Pulsar's path), the bundle of a
topic, the live brokers, and what this broker owns.

Added before the other admin routes: their patterns would match first.
"""

from __future__ import annotations

from aiohttp import web

from magnetar.broker.admin.base import HttpError, no_content, topic_from_path
from magnetar.broker.cluster.brokers import live_brokers
from magnetar.broker.cluster.bundles import bundle_of, parse_range
from magnetar.broker.cluster.member import ClusterMember


def routes(member: ClusterMember) -> list[web.RouteDef]:
    bundles = member.config.default_namespace_bundles

    async def unload_bundle(request: web.Request) -> web.StreamResponse:
        info = request.match_info
        namespace = f"{info['tenant']}/{info['namespace']}"
        try:
            bundle = parse_range(namespace, info["bundle"], bundles)
        except ValueError as exc:
            raise HttpError(412, str(exc)) from exc
        owner = await member.owner_of(bundle)
        if owner is not None and not member.is_me(owner):
            # Only the owner can close the bundle's topics: send the caller there.
            raise web.HTTPTemporaryRedirect(owner.web_service_url + request.path_qs)
        await member.unload(bundle)
        return no_content()

    async def topic_bundle(request: web.Request) -> web.Response:
        name = topic_from_path(request)
        return web.json_response(bundle_of(name, bundles).range_name)

    async def brokers(request: web.Request) -> web.Response:
        found = await live_brokers(member.client, member.keys)
        return web.json_response([b.broker_id for b in found])

    async def ownership(request: web.Request) -> web.Response:
        return web.json_response(member.owner_info())

    return [
        web.put("/admin/v2/namespaces/{tenant}/{namespace}/{bundle}/unload", unload_bundle),
        web.get("/admin/v2/{domain}/{tenant}/{namespace}/{topic}/bundle", topic_bundle),
        web.get("/admin/v2/brokers/{cluster}", brokers),
        web.get("/admin/v2/broker-stats/ownership", ownership),
    ]
