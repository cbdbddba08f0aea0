"""Admin v2 policies, per namespace and per topic (topic wins over namespace
over broker): deduplication, and key-window deduplication (Magnetar's)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from magnetar.broker.admin.base import HttpError, json_body, no_content, topic_from_path
from magnetar.broker.keywindow import POLICY_KEY as KEY_WINDOW_POLICY
from magnetar.broker.keywindow import InvalidPolicy, KeyWindowPolicy
from magnetar.broker.service import BrokerService

DEDUP_KEY = "deduplicationEnabled"


def _flag(body: object) -> bool:
    if not isinstance(body, bool):
        raise HttpError(400, f"the body must be true or false, got {body!r}")
    return body


def _window(body: object) -> dict[str, Any]:
    """A validated dedupKeyWindow policy, stored in its normal form."""
    try:
        return KeyWindowPolicy.from_json(body).to_json()
    except InvalidPolicy as exc:
        raise HttpError(400, str(exc)) from exc


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
        await service.refresh_policies(info["tenant"], info["namespace"])
        return no_content()

    async def get_topic_dedup(request: web.Request) -> web.Response:
        topic = topic_from_path(request)
        return web.json_response((await resources.get_topic_policies(topic)).get(DEDUP_KEY))

    async def set_topic_dedup(request: web.Request) -> web.Response:
        topic = topic_from_path(request)
        await service.check_namespace(topic)
        value = _flag(await json_body(request)) if request.method == "POST" else None
        await resources.set_topic_policy(topic, DEDUP_KEY, value)
        await service.refresh_policies(topic.tenant, topic.namespace)
        return no_content()

    async def get_ns_window(request: web.Request) -> web.Response:
        info = request.match_info
        policies = await resources.get_policies(info["tenant"], info["namespace"])
        return web.json_response(policies.get(KEY_WINDOW_POLICY))

    async def set_ns_window(request: web.Request) -> web.Response:
        info = request.match_info
        value = _window(await json_body(request)) if request.method == "POST" else None
        await resources.set_policy(info["tenant"], info["namespace"], KEY_WINDOW_POLICY, value)
        await service.refresh_policies(info["tenant"], info["namespace"])
        return no_content()

    async def get_topic_window(request: web.Request) -> web.Response:
        topic = topic_from_path(request)
        policies = await resources.get_topic_policies(topic)
        return web.json_response(policies.get(KEY_WINDOW_POLICY))

    async def set_topic_window(request: web.Request) -> web.Response:
        topic = topic_from_path(request)
        await service.check_namespace(topic)
        value = _window(await json_body(request)) if request.method == "POST" else None
        await resources.set_topic_policy(topic, KEY_WINDOW_POLICY, value)
        await service.refresh_policies(topic.tenant, topic.namespace)
        return no_content()

    ns_window = "/admin/v2/namespaces/{tenant}/{namespace}/dedupKeyWindow"
    topic_window = "/admin/v2/{domain}/{tenant}/{namespace}/{topic}/dedupKeyWindow"
    ns = "/admin/v2/namespaces/{tenant}/{namespace}/deduplication"
    topic = "/admin/v2/{domain}/{tenant}/{namespace}/{topic}/deduplicationEnabled"
    return [
        web.get(ns, get_ns_dedup),
        web.post(ns, set_ns_dedup),
        web.delete(ns, set_ns_dedup),
        web.get(topic, get_topic_dedup),
        web.post(topic, set_topic_dedup),
        web.delete(topic, set_topic_dedup),
        web.get(ns_window, get_ns_window),
        web.post(ns_window, set_ns_window),
        web.delete(ns_window, set_ns_window),
        web.get(topic_window, get_topic_window),
        web.post(topic_window, set_topic_window),
        web.delete(topic_window, set_topic_window),
    ]
