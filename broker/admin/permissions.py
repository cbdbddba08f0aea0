"""Namespace permissions (Pulsar admin v2): which role may produce and
consume in a namespace, kept in its policies' `auth_policies.namespace_auth`
as Pulsar keeps it (a namespace created with that body has them too)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from magnetar.broker.admin.base import HttpError, json_body, no_content
from magnetar.broker.auth.authorization import ACTIONS, namespace_grants
from magnetar.broker.service.broker_service import BrokerService


def actions_from_body(body: object) -> list[str]:
    if not isinstance(body, list) or not all(a in ACTIONS for a in body):
        raise HttpError(400, f"the body must be a list of actions among {list(ACTIONS)}")
    return sorted(set(body))


def routes(service: BrokerService) -> list[web.RouteDef]:
    resources = service.resources

    async def _update(request: web.Request, actions: list[str] | None) -> None:
        info = request.match_info
        tenant, namespace = info["tenant"], info["namespace"]
        policies: dict[str, Any] = dict(await resources.get_policies(tenant, namespace))
        grants = namespace_grants(policies)
        if actions is None:
            grants.pop(info["role"], None)
        else:
            grants[info["role"]] = actions
        auth = dict(policies.get("auth_policies") or {})
        auth["namespace_auth"] = grants
        policies["auth_policies"] = auth
        await resources.set_policies(tenant, namespace, policies)

    async def list_permissions(request: web.Request) -> web.Response:
        info = request.match_info
        policies = await resources.get_policies(info["tenant"], info["namespace"])
        return web.json_response(namespace_grants(policies))

    async def grant(request: web.Request) -> web.Response:
        await _update(request, actions_from_body(await json_body(request)))
        return no_content()

    async def revoke(request: web.Request) -> web.Response:
        await _update(request, None)
        return no_content()

    base = "/admin/v2/namespaces/{tenant}/{namespace}/permissions"
    return [
        web.get(base, list_permissions),
        web.post(f"{base}/{{role}}", grant),
        web.delete(f"{base}/{{role}}", revoke),
    ]
