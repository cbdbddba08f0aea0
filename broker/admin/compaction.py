"""Admin v2 compaction: `PUT .../{topic}/compaction` starts a run (204, 409
while one runs), `GET` reports its status (Pulsar's LongRunningProcessStatus);
the compactionThreshold policy (bytes) per namespace and per topic."""

from __future__ import annotations

from aiohttp import web

from magnetar.broker.admin.base import HttpError, json_body, no_content, topic_from_path
from magnetar.broker.compaction.state import CompactionRunning, TopicCompaction
from magnetar.broker.policies.resolver import (
    COMPACTION_THRESHOLD_NAMESPACE,
    COMPACTION_THRESHOLD_TOPIC,
)
from magnetar.broker.service.broker_service import BrokerService
from magnetar.broker.topics.base import is_persistent
from magnetar.proto.naming import TopicName


def routes(service: BrokerService) -> list[web.RouteDef]:
    async def compactions(topic: TopicName) -> list[TopicCompaction]:
        if not topic.persistent:
            raise HttpError(405, "only persistent topics can be compacted")
        names = [topic]
        if topic.partition_index < 0:
            count = await service.resources.get_partitions(topic)
            names = [topic.partition(i) for i in range(count)] or names
        found = []
        for name in names:
            loaded = await service.get_topic(str(name), create=False)
            assert is_persistent(loaded)
            found.append(loaded.compaction)
        return found

    async def trigger(request: web.Request) -> web.Response:
        targets = await compactions(topic_from_path(request))
        if any(c.running for c in targets):
            raise HttpError(409, "Compaction already in progress")
        try:
            for compaction in targets:
                compaction.trigger()
        except CompactionRunning as exc:
            raise HttpError(409, exc.message) from exc
        return no_content()

    async def status(request: web.Request) -> web.Response:
        targets = await compactions(topic_from_path(request))
        # A partitioned topic reports its least advanced partition.
        order = ["ERROR", "RUNNING", "NOT_RUN", "SUCCESS"]
        worst = min(targets, key=lambda c: order.index(c.status.value))
        return web.json_response({"status": worst.status.value, "lastError": worst.last_error})

    resources = service.resources

    async def get_ns_threshold(request: web.Request) -> web.Response:
        info = request.match_info
        policies = await resources.get_policies(info["tenant"], info["namespace"])
        return web.json_response(policies.get(COMPACTION_THRESHOLD_NAMESPACE))

    async def set_ns_threshold(request: web.Request) -> web.Response:
        info = request.match_info
        value = _threshold(await json_body(request)) if request.method != "DELETE" else None
        await service.policies.set_namespace_policy(
            info["tenant"], info["namespace"], COMPACTION_THRESHOLD_NAMESPACE, value
        )
        return no_content()

    async def get_topic_threshold(request: web.Request) -> web.Response:
        topic = topic_from_path(request)
        policies = await resources.get_topic_policies(topic)
        return web.json_response(policies.get(COMPACTION_THRESHOLD_TOPIC))

    async def set_topic_threshold(request: web.Request) -> web.Response:
        topic = topic_from_path(request)
        await service.check_namespace(topic)
        value = _threshold(await json_body(request)) if request.method != "DELETE" else None
        await service.policies.set_topic_policy(topic, COMPACTION_THRESHOLD_TOPIC, value)
        return no_content()

    path = "/admin/v2/{domain}/{tenant}/{namespace}/{topic}/compaction"
    ns = "/admin/v2/namespaces/{tenant}/{namespace}/compactionThreshold"
    topic = "/admin/v2/{domain}/{tenant}/{namespace}/{topic}/compactionThreshold"
    return [
        web.put(path, trigger),
        web.get(path, status),
        web.get(ns, get_ns_threshold),
        web.put(ns, set_ns_threshold),
        web.post(ns, set_ns_threshold),
        web.delete(ns, set_ns_threshold),
        web.get(topic, get_topic_threshold),
        web.post(topic, set_topic_threshold),
        web.delete(topic, set_topic_threshold),
    ]


def _threshold(body: object) -> int:
    if not isinstance(body, int) or isinstance(body, bool) or body < 0:
        raise HttpError(400, f"the threshold is a byte count >= 0, got {body!r}")
    return body
