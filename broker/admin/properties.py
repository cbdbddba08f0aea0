"""Admin v2 properties: free string -> string labels on a namespace and on a
topic (Pulsar's `namespaces ... properties` and `topics ... properties`).

Namespace properties live in the namespace's Policies under Pulsar's field
name `properties`. Pulsar keeps a topic's properties with its managed
ledger (a partitioned topic's in its partitioned metadata); our storage API
has no per-ledger string map, so they live in the topic's policies document,
the one per-topic metadata record the broker keeps, under `properties`. That
document is shared by a partitioned topic and its partitions, so a
partition answers its partitioned topic's properties.

Subscription properties (`.../subscription/{subName}/properties`) are not
served: a subscription here has no string -> string properties to answer
with (a cursor keeps string -> int ones for its mark-delete position only).

Statuses and bodies follow Pulsar's JAX-RS resources: writes answer 204; the
single-key GET and DELETE of a namespace answer the value as plain text (a
Java String entity, which Pulsar writes raw, not as JSON), or 204 with no
body when the key is not set.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from magnetar.broker.admin.base import (
    HttpError,
    json_body,
    no_content,
    partition_names,
    stored_topic,
    topic_from_path,
)
from magnetar.broker.service.broker_service import BrokerService
from magnetar.proto.naming import TopicName

# Pulsar's field name in Policies; the same key in a topic's policies document.
FIELD = "properties"

NAMESPACE = "/admin/v2/namespaces/{tenant}/{namespace}"
TOPIC = "/admin/v2/{domain}/{tenant}/{namespace}/{topic}"


def parse_properties(body: object) -> dict[str, str]:
    """A JSON object of string values (Pulsar's Map<String, String>); 400 otherwise."""
    if not isinstance(body, dict):
        raise HttpError(400, f"the body must be a JSON object of string values, got {body!r}")
    wrong = sorted(key for key, value in body.items() if not isinstance(value, str))
    if wrong:
        raise HttpError(400, f"property values must be strings: {', '.join(wrong)}")
    return dict(body)


def _stored(value: object) -> dict[str, str]:
    """What a document holds under FIELD, as a map (absent: empty)."""
    return dict(value) if isinstance(value, dict) else {}


def _text(value: str | None) -> web.Response:
    """A String entity as Pulsar answers it: raw text, or 204 for null."""
    if value is None:
        return no_content()
    return web.Response(text=value, content_type="application/json")


def routes(service: BrokerService) -> list[web.RouteDef]:
    resources = service.resources
    # Every change reads, changes and writes the whole map: one at a time on
    # this broker, so two concurrent PUTs both land (Pulsar writes with a
    # version check instead).
    lock = asyncio.Lock()

    # ------------------------------------------------------------ namespaces

    async def namespace_properties(request: web.Request) -> dict[str, str]:
        info = request.match_info
        # 404 when the namespace does not exist.
        policies = await resources.get_policies(info["tenant"], info["namespace"])
        return _stored(policies.get(FIELD))

    async def write_namespace(request: web.Request, properties: dict[str, str]) -> None:
        info = request.match_info
        # Through the resolver so policy listeners hear of the change; an
        # empty map is removed rather than stored (GET answers {} either way).
        await service.policies.set_namespace_policy(
            info["tenant"], info["namespace"], FIELD, properties or None
        )

    async def get_ns_properties(request: web.Request) -> web.Response:
        return web.json_response(await namespace_properties(request))

    async def put_ns_properties(request: web.Request) -> web.Response:
        """Merge the body's keys into the stored map (Pulsar's putAll)."""
        body = await json_body(request)
        if body is None:
            raise HttpError(400, "the body must be a JSON object of string values")
        update = parse_properties(body)
        async with lock:
            current = await namespace_properties(request)
            await write_namespace(request, {**current, **update})
        return no_content()

    async def clear_ns_properties(request: web.Request) -> web.Response:
        async with lock:
            await namespace_properties(request)  # 404 for a missing namespace
            await write_namespace(request, {})
        return no_content()

    async def get_ns_property(request: web.Request) -> web.Response:
        properties = await namespace_properties(request)
        return _text(properties.get(request.match_info["key"]))

    async def set_ns_property(request: web.Request) -> web.Response:
        info = request.match_info
        async with lock:
            current = await namespace_properties(request)
            await write_namespace(request, {**current, info["key"]: info["value"]})
        return no_content()

    async def remove_ns_property(request: web.Request) -> web.Response:
        """Answers the value removed (Pulsar's remove returns the old value)."""
        async with lock:
            current = await namespace_properties(request)
            old = current.pop(request.match_info["key"], None)
            if old is not None:
                await write_namespace(request, current)
        return _text(old)

    # ---------------------------------------------------------------- topics

    async def existing_topic(request: web.Request) -> TopicName:
        """The topic the path names, 404 unless it exists: a partitioned
        topic by its metadata, a partition within its topic's count, any
        other topic by being loaded or stored (loading it, as Pulsar's
        getTopicIfExists does)."""
        name = topic_from_path(request)
        await service.check_namespace(name)
        if await partition_names(service, name):
            return name
        if name.partition_index >= 0:
            count = await resources.get_partitions(name.partitioned_base)
            if name.partition_index < count:
                return name
        await stored_topic(service, request)  # 404 missing, 405 non-persistent
        return name

    async def get_topic_properties(request: web.Request) -> web.Response:
        name = await existing_topic(request)
        policies = await resources.get_topic_policies(name)
        return web.json_response(_stored(policies.get(FIELD)))

    async def put_topic_properties(request: web.Request) -> web.Response:
        """Merge the body's keys in; an empty or missing body changes
        nothing (Pulsar ignores it), once the topic is known to exist."""
        body = await json_body(request)
        update = {} if body is None else parse_properties(body)
        name = await existing_topic(request)
        if not update:
            return no_content()
        async with lock:
            current = _stored((await resources.get_topic_policies(name)).get(FIELD))
            await service.policies.set_topic_policy(name, FIELD, {**current, **update})
        return no_content()

    async def remove_topic_property(request: web.Request) -> web.Response:
        key = request.query.get("key")
        if not key:
            raise HttpError(400, "the query parameter `key` names the property to remove")
        name = await existing_topic(request)
        async with lock:
            current = _stored((await resources.get_topic_policies(name)).get(FIELD))
            if current.pop(key, None) is not None:
                await service.policies.set_topic_policy(name, FIELD, current or None)
        return no_content()

    return [
        web.get(f"{NAMESPACE}/properties", get_ns_properties),
        web.put(f"{NAMESPACE}/properties", put_ns_properties),
        web.delete(f"{NAMESPACE}/properties", clear_ns_properties),
        web.get(f"{NAMESPACE}/property/{{key}}", get_ns_property),
        web.delete(f"{NAMESPACE}/property/{{key}}", remove_ns_property),
        web.put(f"{NAMESPACE}/property/{{key}}/{{value}}", set_ns_property),
        web.get(f"{TOPIC}/properties", get_topic_properties),
        web.put(f"{TOPIC}/properties", put_topic_properties),
        web.delete(f"{TOPIC}/properties", remove_topic_property),
    ]
