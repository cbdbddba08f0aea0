"""Admin v2 namespace policies for operations: retention, message TTL, backlog
quota and the schema compatibility strategy, stored in the namespace's
Policies under Pulsar's field names (retention_policies,
message_ttl_in_seconds, backlog_quota_map, schema_compatibility_strategy).

The schema strategy is stored only (the schema issue enforces it);
retention, TTL and backlog quota are read by the broker where it enforces
them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web

from magnetar.broker.admin.base import HttpError, json_body, no_content
from magnetar.broker.policies.backlog_quota import QUOTA_KEY as BACKLOG_QUOTA_KEY
from magnetar.broker.policies.resolver import (
    RETENTION_POLICY,
    SCHEMA_STRATEGY_NAMESPACE,
    TTL_POLICY,
)
from magnetar.broker.service.broker_service import BrokerService

BACKLOG_POLICIES = ("producer_request_hold", "producer_exception", "consumer_backlog_eviction")
QUOTA_TYPES = ("destination_storage", "message_age")
SCHEMA_STRATEGIES = (
    "UNDEFINED",
    "ALWAYS_INCOMPATIBLE",
    "ALWAYS_COMPATIBLE",
    "BACKWARD",
    "FORWARD",
    "FULL",
    "BACKWARD_TRANSITIVE",
    "FORWARD_TRANSITIVE",
    "FULL_TRANSITIVE",
)


def _int(value: object, what: str, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise HttpError(400, f"{what} must be an integer, got {value!r}")
    if value < minimum:
        raise HttpError(412, f"{what} must be at least {minimum}, got {value}")
    return value


def _retention(body: object) -> dict[str, Any]:
    """RetentionPolicies: minutes and MB, -1 meaning unlimited, 0 none."""
    if not isinstance(body, dict):
        raise HttpError(400, f"retention must be an object, got {body!r}")
    return {
        "retentionTimeInMinutes": _int(
            body.get("retentionTimeInMinutes", 0), "retentionTimeInMinutes", minimum=-1
        ),
        "retentionSizeInMB": _int(
            body.get("retentionSizeInMB", 0), "retentionSizeInMB", minimum=-1
        ),
    }


def _ttl(body: object) -> int:
    return _int(body, "the message TTL in seconds", minimum=0)


def _quota(body: object) -> dict[str, Any]:
    """BacklogQuota: limitSize bytes, limitTime seconds (-1: none), policy."""
    if not isinstance(body, dict):
        raise HttpError(400, f"a backlog quota must be an object, got {body!r}")
    policy = body.get("policy", "producer_request_hold")
    if policy not in BACKLOG_POLICIES:
        raise HttpError(400, f"policy must be one of {', '.join(BACKLOG_POLICIES)}, got {policy!r}")
    size = body.get("limitSize", body.get("limit", -1))
    return {
        "limitSize": _int(size, "limitSize", minimum=-1),
        "limitTime": _int(body.get("limitTime", -1), "limitTime", minimum=-1),
        "policy": policy,
    }


def _strategy(body: object) -> str:
    if body not in SCHEMA_STRATEGIES:
        raise HttpError(400, f"schema compatibility strategy must be one of {SCHEMA_STRATEGIES}")
    assert isinstance(body, str)
    return body


def routes(service: BrokerService) -> list[web.RouteDef]:
    resources = service.resources

    def simple(key: str, parse: Callable[[object], object]) -> tuple[Any, Any]:
        async def get(request: web.Request) -> web.Response:
            info = request.match_info
            policies = await resources.get_policies(info["tenant"], info["namespace"])
            return web.json_response(policies.get(key))

        async def set_(request: web.Request) -> web.Response:
            info = request.match_info
            value = None if request.method == "DELETE" else parse(await json_body(request))
            await service.policies.set_namespace_policy(
                info["tenant"], info["namespace"], key, value
            )
            return no_content()

        return get, set_

    async def get_quota_map(request: web.Request) -> web.Response:
        info = request.match_info
        policies = await resources.get_policies(info["tenant"], info["namespace"])
        return web.json_response(policies.get(BACKLOG_QUOTA_KEY) or {})

    async def set_quota(request: web.Request) -> web.Response:
        info = request.match_info
        kind = request.query.get("backlogQuotaType", "destination_storage")
        if kind not in QUOTA_TYPES:
            raise HttpError(400, f"backlogQuotaType must be one of {QUOTA_TYPES}, got {kind!r}")
        policies = await resources.get_policies(info["tenant"], info["namespace"])
        quotas = dict(policies.get(BACKLOG_QUOTA_KEY) or {})
        if request.method == "DELETE":
            quotas.pop(kind, None)
        else:
            quotas[kind] = _quota(await json_body(request))
        await service.policies.set_namespace_policy(
            info["tenant"], info["namespace"], BACKLOG_QUOTA_KEY, quotas or None
        )
        return no_content()

    ns = "/admin/v2/namespaces/{tenant}/{namespace}"
    defs: list[web.RouteDef] = []
    for path, key, parse, setters in (
        ("retention", RETENTION_POLICY, _retention, ("POST", "DELETE")),
        ("messageTTL", TTL_POLICY, _ttl, ("POST", "DELETE")),
        ("schemaCompatibilityStrategy", SCHEMA_STRATEGY_NAMESPACE, _strategy, ("PUT",)),
    ):
        get, set_ = simple(key, parse)
        defs.append(web.get(f"{ns}/{path}", get))
        defs.extend(web.route(method, f"{ns}/{path}", set_) for method in setters)
    defs += [
        web.get(f"{ns}/backlogQuotaMap", get_quota_map),
        web.post(f"{ns}/backlogQuota", set_quota),
        web.delete(f"{ns}/backlogQuota", set_quota),
    ]
    return defs
