"""Admin v2 policy switches, per namespace and per topic (topic wins over
namespace over broker): deduplication so far."""

from __future__ import annotations

from aiohttp import web

from magnetar.broker.admin.base import HttpError, json_body, no_content, topic_from_path
from magnetar.broker.service import BrokerService

DEDUP_KEY = "deduplicationEnabled"


def _flag(body: object) -> bool:
    if not isinstance(body, bool):
        raise HttpError(400, f"the body must be true or false, got {body!r}")
    return body


def routes(service: BrokerService) -> list[web.RouteDef]:
    resources = service.resources

    async def get_ns_dedup(request: web.Request) -> web.Response:
        info = request.match_info
        policies = await resources.get_policies(info["tenant"], info["namespace"])
        return web.json_response(policies.get(DEDUP_KEY))

    async def set_ns_dedup(request: web.Request) -> web.Response:
        info = request.match_info
        value = _flag(await json_body(request)) if request.method == "POST" else None
        await resources.set_policy(info["tenant"], info["namespace"], DEDUP_KEY, value)
        await service.refresh_deduplication(info["tenant"], info["namespace"])
        return no_content()

    async def get_topic_dedup(request: web.Request) -> web.Response:
        topic = topic_from_path(request)
        return web.json_response((await resources.get_topic_policies(topic)).get(DEDUP_KEY))

    async def set_topic_dedup(request: web.Request) -> web.Response:
        topic = topic_from_path(request)
        await service.check_namespace(topic)
        value = _flag(await json_body(request)) if request.method == "POST" else None
        await resources.set_topic_policy(topic, DEDUP_KEY, value)
        await service.refresh_deduplication(topic.tenant, topic.namespace)
        return no_content()

    ns = "/admin/v2/namespaces/{tenant}/{namespace}/deduplication"
    topic = "/admin/v2/{domain}/{tenant}/{namespace}/{topic}/deduplicationEnabled"
    return [
        web.get(ns, get_ns_dedup),
        web.post(ns, set_ns_dedup),
        web.delete(ns, set_ns_dedup),
        web.get(topic, get_topic_dedup),
        web.post(topic, set_topic_dedup),
        web.delete(topic, set_topic_dedup),
    ]
