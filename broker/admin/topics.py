"""Admin v2 for topics: partitioned-topic metadata and topic lists, and the
HTTP lookup the official client uses with an `http://` service URL."""

from __future__ import annotations

from aiohttp import web

from magnetar.broker.admin.base import HttpError, json_body, no_content, topic_from_path
from magnetar.broker.service.broker_service import BrokerService

LISTENER_HEADER = "X-Pulsar-ListenerName"


def _partition_count(body: object) -> int:
    if isinstance(body, bool) or not isinstance(body, int):
        raise HttpError(400, f"the body must be a partition count, got {body!r}")
    if body < 1:
        raise HttpError(412, f"the number of partitions must be at least 1, got {body}")
    return body


def _force(request: web.Request) -> bool:
    """Pulsar's `?force=true`: close the topic's clients rather than refuse."""
    return request.query.get("force", "false").lower() == "true"


def routes(service: BrokerService) -> list[web.RouteDef]:
    async def get_partitions(request: web.Request) -> web.Response:
        topic = topic_from_path(request)
        partitions = await service.partitioned_metadata(str(topic))
        return web.json_response({"partitions": partitions})

    async def create_partitioned(request: web.Request) -> web.Response:
        topic = topic_from_path(request)
        count = _partition_count(await json_body(request))
        await service.create_partitioned_topic(str(topic), count)
        return no_content()

    async def update_partitions(request: web.Request) -> web.Response:
        topic = topic_from_path(request)
        await service.update_partitions(str(topic), _partition_count(await json_body(request)))
        return no_content()

    async def delete_partitioned(request: web.Request) -> web.Response:
        await service.delete_partitioned_topic(str(topic_from_path(request)), force=_force(request))
        return no_content()

    async def delete_topic(request: web.Request) -> web.Response:
        await service.delete_known_topic(str(topic_from_path(request)), force=_force(request))
        return no_content()

    async def list_topics(request: web.Request) -> web.Response:
        info = request.match_info
        domain = info["domain"]
        topics = await service.namespace_topics(info["tenant"], info["namespace"])
        return web.json_response([t for t in topics if t.startswith(f"{domain}://")])

    async def list_partitioned(request: web.Request) -> web.Response:
        info = request.match_info
        await service.resources.get_policies(info["tenant"], info["namespace"])
        return web.json_response(
            await service.resources.partitioned_topics(
                info["tenant"], info["namespace"], info["domain"]
            )
        )

    async def lookup(request: web.Request) -> web.Response:
        topic = topic_from_path(request)
        listener = request.headers.get(LISTENER_HEADER) or request.query.get("listenerName", "")
        # In a cluster this is the owner's URL (or the broker that will take it).
        url, url_tls, _redirect = await service.lookup(str(topic), listener)
        return web.json_response(
            {
                "brokerUrl": url,
                "brokerUrlTls": url_tls,
                "nativeUrl": url,
                "httpUrl": f"{request.scheme}://{request.host}",
                "httpUrlTls": "",
            }
        )

    async def terminate(request: web.Request) -> web.Response:
        topic = topic_from_path(request)
        last = await service.terminate_topic(str(topic))
        return web.json_response(
            {
                "ledgerId": last.ledger_id,
                "entryId": last.entry_id,
                "partitionIndex": topic.partition_index,
            }
        )

    path = "{domain}/{tenant}/{namespace}/{topic}"
    ns = "/admin/v2/{domain}/{tenant}/{namespace}"
    return [
        web.get(f"/admin/v2/{path}/partitions", get_partitions),
        web.put(f"/admin/v2/{path}/partitions", create_partitioned),
        web.post(f"/admin/v2/{path}/partitions", update_partitions),
        web.delete(f"/admin/v2/{path}/partitions", delete_partitioned),
        web.delete(f"/admin/v2/{path}", delete_topic),
        web.post(f"/admin/v2/{path}/terminate", terminate),
        web.get(ns, list_topics),
        web.get(f"{ns}/partitioned", list_partitioned),
        web.get(f"/lookup/v2/topic/{path}", lookup),
    ]
