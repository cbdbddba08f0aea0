"""Admin v2 policies, per namespace and per topic (topic wins over namespace
over broker): deduplication, publish rate, and key-window deduplication
(Magnetar's). Each is GET / POST (set) / DELETE (inherit again) at both
levels; a change applies to the loaded topics at once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web

from magnetar.broker.admin.base import HttpError, json_body, no_content, topic_from_path
from magnetar.broker.features.keywindow import (
    POLICY_KEY as KEY_WINDOW_POLICY,
    InvalidPolicy,
    KeyWindowPolicy,
)
from magnetar.broker.policies.rates import (
    DISPATCH_RATE_POLICY,
    PUBLISH_RATE_POLICY,
    DispatchRate,
    InvalidRate,
    PublishRate,
)
from magnetar.broker.policies.resolver import DEDUPLICATION_POLICY
from magnetar.broker.service.broker_service import BrokerService

Parse = Callable[[object], Any]


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


def _publish_rate(body: object) -> dict[str, Any]:
    try:
        return PublishRate.from_json(body).to_json()
    except InvalidRate as exc:
        raise HttpError(400, str(exc)) from exc


def _dispatch_rate(body: object) -> dict[str, Any]:
    try:
        return DispatchRate.from_json(body).to_json()
    except InvalidRate as exc:
        raise HttpError(400, str(exc)) from exc


def _policy_routes(
    service: BrokerService, key: str, ns_path: str, topic_path: str, parse: Parse
) -> list[web.RouteDef]:
    """GET / POST / DELETE of one policy under a namespace and under a topic."""
    resources = service.resources

    async def get_ns(request: web.Request) -> web.Response:
        info = request.match_info
        policies = await resources.get_policies(info["tenant"], info["namespace"])
        return web.json_response(policies.get(key))

    async def set_ns(request: web.Request) -> web.Response:
        info = request.match_info
        value = parse(await json_body(request)) if request.method == "POST" else None
        await service.policies.set_namespace_policy(info["tenant"], info["namespace"], key, value)
        return no_content()

    async def get_topic(request: web.Request) -> web.Response:
        topic = topic_from_path(request)
        return web.json_response((await resources.get_topic_policies(topic)).get(key))

    async def set_topic(request: web.Request) -> web.Response:
        topic = topic_from_path(request)
        await service.check_namespace(topic)
        value = parse(await json_body(request)) if request.method == "POST" else None
        await service.policies.set_topic_policy(topic, key, value)
        return no_content()

    ns = f"/admin/v2/namespaces/{{tenant}}/{{namespace}}/{ns_path}"
    topic = f"/admin/v2/{{domain}}/{{tenant}}/{{namespace}}/{{topic}}/{topic_path}"
    return [
        web.get(ns, get_ns),
        web.post(ns, set_ns),
        web.delete(ns, set_ns),
        web.get(topic, get_topic),
        web.post(topic, set_topic),
        web.delete(topic, set_topic),
    ]


def routes(service: BrokerService) -> list[web.RouteDef]:
    return [
        *_policy_routes(
            service, DEDUPLICATION_POLICY, "deduplication", "deduplicationEnabled", _flag
        ),
        *_policy_routes(service, KEY_WINDOW_POLICY, "dedupKeyWindow", "dedupKeyWindow", _window),
        *_policy_routes(service, PUBLISH_RATE_POLICY, "publishRate", "publishRate", _publish_rate),
        *_policy_routes(
            service, DISPATCH_RATE_POLICY, "dispatchRate", "dispatchRate", _dispatch_rate
        ),
    ]
