"""What every admin handler shares: Pulsar's status codes and error bodies.

Errors leave as `{"reason": ...}` with Pulsar's statuses: 204 for success
without a body, 400 bad input, 404 unknown, 409 exists, 412 precondition.
Handlers raise; one middleware turns resource, service and storage errors
into those answers, so no handler formats an error itself.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import structlog
from aiohttp import web

from magnetar.broker.errors import BrokerServiceError
from magnetar.broker.resources import (
    InvalidResource,
    ResourceBusy,
    ResourceError,
    ResourceExists,
    ResourceNotFound,
)
from magnetar.broker.storage.api import StorageError
from magnetar.broker.topics.base import StoredSubscription, StoredTopic, is_persistent
from magnetar.proto.errors import ServerError
from magnetar.proto.naming import InvalidTopicName, TopicName

# Typing only: the admin leaves must not import the service they serve.
if TYPE_CHECKING:
    from magnetar.broker.service.broker_service import BrokerService

log = structlog.get_logger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class HttpError(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


_RESOURCE_STATUS: list[tuple[type[ResourceError], int]] = [
    (ResourceNotFound, 404),
    (ResourceExists, 409),
    (ResourceBusy, 412),
    (InvalidResource, 412),
]
_SERVICE_STATUS = {
    ServerError.TopicNotFound: 404,
    ServerError.SubscriptionNotFound: 404,
    ServerError.ConsumerNotFound: 404,
    ServerError.InvalidTopicName: 412,
    ServerError.NotAllowedError: 405,
    ServerError.ConsumerBusy: 412,
    ServerError.ProducerBusy: 412,
    ServerError.ServiceNotReady: 503,
    ServerError.IncompatibleSchema: 409,
}


def error_response(status: int, reason: str) -> web.Response:
    return web.json_response({"reason": reason}, status=status)


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except HttpError as exc:
        return error_response(exc.status, exc.reason)
    except ResourceError as exc:
        status = next(code for kind, code in _RESOURCE_STATUS if isinstance(exc, kind))
        return error_response(status, str(exc))
    except BrokerServiceError as exc:
        return error_response(_SERVICE_STATUS.get(exc.code, 500), exc.message)
    except StorageError as exc:
        log.warning("admin request failed in storage", path=request.path, error=str(exc))
        return error_response(500, f"storage error: {exc}")
    except web.HTTPException as exc:
        # aiohttp's own answers (no such route, method not allowed) under
        # /admin/ get Pulsar's JSON body too.
        if exc.status < 400 or not request.path.startswith("/admin/"):
            raise
        return error_response(exc.status, f"{exc.reason}: {request.method} {request.path}")


def caller_credentials(request: web.Request) -> dict[str, str]:
    """The headers that carry the caller's credentials, for a request this
    broker makes on the caller's behalf to another broker."""
    return {k: v for k, v in request.headers.items() if k.lower() == "authorization"}


def no_content() -> web.Response:
    return web.Response(status=204)


async def json_body(request: web.Request, *, default: Any = None) -> Any:
    """The request's JSON body; `default` when it is empty; 400 when malformed."""
    text = await request.text()
    if not text.strip():
        return default
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise HttpError(400, f"the body is not valid JSON: {exc}") from exc


def topic_from_path(request: web.Request) -> TopicName:
    """The topic named by {domain}/{tenant}/{namespace}/{topic} path parts."""
    info = request.match_info
    domain = info["domain"]
    if domain not in ("persistent", "non-persistent"):
        raise HttpError(404, f"unknown topic domain {domain!r}")
    try:
        return TopicName.parse(f"{domain}://{info['tenant']}/{info['namespace']}/{info['topic']}")
    except InvalidTopicName as exc:
        raise HttpError(412, str(exc)) from exc


async def partition_names(service: BrokerService, name: TopicName) -> list[str]:
    """The partitions of a partitioned topic's base name (empty otherwise)."""
    if name.partition_index >= 0:
        return []
    count = await service.resources.get_partitions(name)
    return [str(name.partition(i)) for i in range(count)]


async def refuse_partitioned_base(service: BrokerService, name: TopicName) -> None:
    """A per-topic call on a partitioned topic's base name would load a stray
    topic of that name: refused (409), naming what to call instead."""
    if await partition_names(service, name):
        raise HttpError(
            409,
            f"{name} is a partitioned topic: call its partitions ({name}-partition-N) "
            "or partitioned-stats",
        )


async def stored_topic(
    service: BrokerService, request: web.Request, *, create: bool = False
) -> StoredTopic:
    """The persistent topic the path names (405 for a non-persistent one)."""
    name = topic_from_path(request)
    await refuse_partitioned_base(service, name)
    topic = await service.get_topic(str(name), create=create)
    if not is_persistent(topic):
        raise HttpError(405, f"{name} is not a persistent topic")
    return topic


async def stored_subscription(service: BrokerService, request: web.Request) -> StoredSubscription:
    """The subscription the path names, on the persistent topic it names."""
    topic = await stored_topic(service, request)
    return await topic.get_subscription(request.match_info["subscription"])
