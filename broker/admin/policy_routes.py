"""Admin v2 routes of every declared policy (policies/catalog.py), at the
namespace level (`/namespaces/{tenant}/{namespace}/<path>`) and the topic
level (`/{domain}/{tenant}/{namespace}/{topic}/<path>`): GET, the policy's
set methods, DELETE (inherit again). A topic-level GET with `applied=true`
answers what the topic runs with (topic, else namespace, else broker).

Writes go through the resolver, which applies them to the loaded topics.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from magnetar.broker.admin.base import HttpError, json_body, no_content, topic_from_path
from magnetar.broker.admin.replication import check_replication_clusters
from magnetar.broker.policies.catalog import (
    POLICIES,
    REPLICATION_CLUSTERS,
    InvalidPolicyValue,
    Policy,
)
from magnetar.broker.service.broker_service import BrokerService

NAMESPACE = "/admin/v2/namespaces/{tenant}/{namespace}"
TOPIC = "/admin/v2/{domain}/{tenant}/{namespace}/{topic}"


def _checked(policy: Policy, body: object) -> object:
    try:
        return policy.check(body)
    except InvalidPolicyValue as exc:
        raise HttpError(exc.status, exc.reason) from exc


async def _new_value(policy: Policy, request: web.Request, current: object) -> object:
    """The value to store after this set or DELETE (None: remove it)."""
    keyed = policy.keyed
    if keyed is None:
        if request.method == "DELETE":
            return None
        return _checked(policy, await json_body(request))
    key = request.query.get(keyed.query, keyed.default_key)
    if key not in keyed.keys:
        raise HttpError(400, f"{keyed.query} must be one of {', '.join(keyed.keys)}, got {key!r}")
    entries: dict[str, Any] = dict(current) if isinstance(current, dict) else {}
    if request.method == "DELETE":
        entries.pop(key, None)
    else:
        entries[key] = _checked(policy, await json_body(request))
    return entries or None


def _answer(policy: Policy, value: object) -> web.Response:
    return web.json_response(policy.unset if value is None else value)


def policy_routes(service: BrokerService, policy: Policy) -> list[web.RouteDef]:
    resources = service.resources
    routes: list[web.RouteDef] = []

    async def get_ns(request: web.Request) -> web.Response:
        info = request.match_info
        stored = await resources.get_policies(info["tenant"], info["namespace"])
        assert policy.namespace_field is not None
        return _answer(policy, stored.get(policy.namespace_field))

    async def set_ns(request: web.Request) -> web.Response:
        info = request.match_info
        tenant, namespace = info["tenant"], info["namespace"]
        assert policy.namespace_field is not None
        current = (await resources.get_policies(tenant, namespace)).get(policy.namespace_field)
        value = await _new_value(policy, request, current)
        if policy is REPLICATION_CLUSTERS:
            await check_replication_clusters(resources, tenant, value)
        await service.policies.set_namespace_policy(
            tenant, namespace, policy.namespace_field, value
        )
        return no_content()

    async def get_topic(request: web.Request) -> web.Response:
        topic = topic_from_path(request)
        if request.query.get("applied", "false").lower() == "true":
            await service.check_namespace(topic)
            return web.json_response((await service.policies.resolve(topic)).applied(policy))
        assert policy.topic_field is not None
        return _answer(policy, (await resources.get_topic_policies(topic)).get(policy.topic_field))

    async def set_topic(request: web.Request) -> web.Response:
        topic = topic_from_path(request)
        await service.check_namespace(topic)
        assert policy.topic_field is not None
        current = (await resources.get_topic_policies(topic)).get(policy.topic_field)
        value = await _new_value(policy, request, current)
        if policy is REPLICATION_CLUSTERS:
            await check_replication_clusters(resources, topic.tenant, value)
        await service.policies.set_topic_policy(topic, policy.topic_field, value)
        return no_content()

    for base, path, setters, get, set_ in (
        (NAMESPACE, policy.namespace_path, policy.namespace_set, get_ns, set_ns),
        (TOPIC, policy.topic_path, policy.topic_set, get_topic, set_topic),
    ):
        if path is None:
            continue
        routes.append(web.get(f"{base}/{policy.read_path or path}", get))
        routes.extend(web.route(method, f"{base}/{path}", set_) for method in setters)
        routes.append(web.delete(f"{base}/{path}", set_))
    return routes


def namespace_routes(service: BrokerService) -> list[web.RouteDef]:
    """The namespace-level routes: they go before the topic routes, whose
    {domain}/{tenant}/{namespace}/{topic} would match them too."""
    return [
        route
        for policy in POLICIES
        for route in policy_routes(service, policy)
        if route.path.startswith(NAMESPACE)
    ]


def topic_routes(service: BrokerService) -> list[web.RouteDef]:
    return [
        route
        for policy in POLICIES
        for route in policy_routes(service, policy)
        if route.path.startswith(TOPIC)
    ]
