"""Admin v2 per-subscription dispatch rate:
`/{domain}/{tenant}/{namespace}/{topic}/{subName}/dispatchRate`, GET / POST /
DELETE. As in Pulsar, the rate is kept in the topic's policies under
`subscriptionPolicies` (subName -> {"dispatchRate": DispatchRate}) and, for
that subscription, wins over the topic's subscriptionDispatchRate
(policies/subscription_rates.py). GET with `applied=true` answers what the
subscription runs with: its own rate, else the topic's, else the namespace's.

Writes go through the resolver, which applies them to the loaded topic.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from magnetar.broker.admin.base import HttpError, json_body, no_content, topic_from_path
from magnetar.broker.policies.catalog import SUBSCRIPTION_DISPATCH_RATE, InvalidPolicyValue
from magnetar.broker.policies.subscription_rates import DISPATCH_RATE_KEY, SUBSCRIPTION_POLICIES
from magnetar.broker.service.broker_service import BrokerService

PATH = "/admin/v2/{domain}/{tenant}/{namespace}/{topic}/{subName}/dispatchRate"


def _entries(stored: object) -> dict[str, dict[str, Any]]:
    """A copy of a stored subscriptionPolicies map, to change and store."""
    if not isinstance(stored, dict):
        return {}
    return {name: dict(entry) for name, entry in stored.items() if isinstance(entry, dict)}


def routes(service: BrokerService) -> list[web.RouteDef]:
    resources = service.resources

    async def get(request: web.Request) -> web.Response:
        topic = topic_from_path(request)
        subscription = request.match_info["subName"]
        own = _entries((await resources.get_topic_policies(topic)).get(SUBSCRIPTION_POLICIES))
        value = own.get(subscription, {}).get(DISPATCH_RATE_KEY)
        if value is None and request.query.get("applied", "false").lower() == "true":
            await service.check_namespace(topic)
            policies = await service.policies.resolve(topic)
            value = policies.applied(SUBSCRIPTION_DISPATCH_RATE)
        return web.json_response(value)

    async def set_(request: web.Request) -> web.Response:
        topic = topic_from_path(request)
        await service.check_namespace(topic)
        subscription = request.match_info["subName"]
        value = None
        if request.method != "DELETE":
            try:
                value = SUBSCRIPTION_DISPATCH_RATE.check(await json_body(request))
            except InvalidPolicyValue as exc:
                raise HttpError(exc.status, exc.reason) from exc
        entries = _entries((await resources.get_topic_policies(topic)).get(SUBSCRIPTION_POLICIES))
        entry = entries.pop(subscription, {})
        if value is None:
            entry.pop(DISPATCH_RATE_KEY, None)
        else:
            entry[DISPATCH_RATE_KEY] = value
        if entry:  # other policies of the subscription stay
            entries[subscription] = entry
        await service.policies.set_topic_policy(topic, SUBSCRIPTION_POLICIES, entries or None)
        return no_content()

    return [web.get(PATH, get), web.post(PATH, set_), web.delete(PATH, set_)]
