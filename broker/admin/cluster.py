"""Cluster mode's admin routes: bundle and namespace unload (Pulsar's paths),
the bundle of a topic, the live brokers, and what this broker owns; and a
middleware that sends topic admin requests to the topic's owner (307, as
Pulsar does). server.py loads this module in cluster mode only, so a
standalone broker never imports the etcd client.

The routes go before the other admin routes: their patterns would match first.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable

import aiohttp
from aiohttp import web
from aiohttp.typedefs import Handler

from magnetar.broker.admin.base import HttpError, caller_credentials, no_content, topic_from_path
from magnetar.broker.cluster.brokers import live_brokers
from magnetar.broker.cluster.bundles import bundle_of, bundles_of, parse_range
from magnetar.broker.cluster.member import ClusterMember
from magnetar.broker.errors import BrokerServiceError
from magnetar.proto.naming import InvalidTopicName, TopicName

_TOPIC_PREFIXES = ("/admin/v2/persistent/", "/admin/v2/non-persistent/")


def admin_topic(path: str) -> TopicName | None:
    """The topic an admin v2 topic path names, or None for other paths."""
    for prefix in _TOPIC_PREFIXES:
        if path.startswith(prefix):
            parts = path[len(prefix) :].split("/")
            if len(parts) < 3:
                return None
            domain = prefix.split("/")[3]
            try:
                return TopicName.parse(f"{domain}://{parts[0]}/{parts[1]}/{parts[2]}")
            except InvalidTopicName:
                return None
    return None


def owner_redirect(member: ClusterMember) -> Callable[..., Awaitable[web.StreamResponse]]:
    """Topic requests go to the broker that serves the topic; an unowned
    topic is taken here, like an authoritative lookup."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        name = admin_topic(request.path)
        if name is not None and not request.path.endswith("/bundle"):
            url = None
            # Not fatal here: the handler answers 503 if this broker cannot take it.
            with contextlib.suppress(BrokerServiceError):
                url = await member.served_elsewhere(name)
            if url is not None:
                raise web.HTTPTemporaryRedirect(url + request.path_qs)
        return await handler(request)

    return middleware


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

    async def unload_namespace(request: web.Request) -> web.StreamResponse:
        """Every bundle of the namespace is unloaded by its owner: this broker
        its own, the other owners through their bundle unload route (with the
        caller's credentials)."""
        info = request.match_info
        namespace = f"{info['tenant']}/{info['namespace']}"
        if member.service is not None:  # 404 when the namespace does not exist
            await member.service.resources.get_policies(info["tenant"], info["namespace"])
        headers = caller_credentials(request)
        failed: list[str] = []
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
            for bundle in bundles_of(namespace, bundles):
                owner = await member.owner_of(bundle)
                if owner is None:
                    continue
                if member.is_me(owner):
                    await member.unload(bundle)
                    continue
                url = f"{owner.web_service_url}/admin/v2/namespaces/{bundle}/unload"
                try:
                    async with http.put(url, headers=headers) as answer:
                        if answer.status != 204:
                            failed.append(f"{bundle}: {answer.status} {await answer.text()}")
                except (aiohttp.ClientError, TimeoutError) as exc:
                    failed.append(f"{bundle}: {owner.broker_id} unreachable: {exc}")
        if failed:
            raise HttpError(500, "some bundles were not unloaded: " + "; ".join(failed))
        return no_content()

    async def topic_bundle(request: web.Request) -> web.Response:
        name = topic_from_path(request)
        return web.json_response(bundle_of(name, bundles).range_name)

    async def brokers(request: web.Request) -> web.Response:
        found = await live_brokers(member.client, member.keys)
        return web.json_response([b.broker_id for b in found])

    async def ownership(request: web.Request) -> web.Response:
        return web.json_response(member.owner_info())

    async def load_report(request: web.Request) -> web.Response:
        """The load this broker last registered (what the others see)."""
        found = {b.broker_id: b for b in await live_brokers(member.client, member.keys)}
        mine = found.get(member.info.broker_id) if member.info is not None else None
        if mine is None:
            raise HttpError(503, "this broker is not registered in the cluster")
        load = mine.load
        return web.json_response(
            {
                "brokerId": mine.broker_id,
                "topics": load.topics,
                "bundles": load.bundles,
                "msgRateIn": load.msg_rate_in,
                "cpu": load.cpu,
            }
        )

    return [
        web.put("/admin/v2/namespaces/{tenant}/{namespace}/{bundle}/unload", unload_bundle),
        web.put("/admin/v2/namespaces/{tenant}/{namespace}/unload", unload_namespace),
        web.get("/admin/v2/{domain}/{tenant}/{namespace}/{topic}/bundle", topic_bundle),
        web.get("/admin/v2/brokers/{cluster}", brokers),
        web.get("/admin/v2/broker-stats/ownership", ownership),
        web.get("/admin/v2/broker-stats/load-report", load_report),
    ]
