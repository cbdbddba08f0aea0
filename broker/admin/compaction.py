"""Admin v2 compaction: `PUT .../{topic}/compaction` starts a run (204, 409
while one runs), `GET` reports its status (Pulsar's LongRunningProcessStatus).
The compactionThreshold policy is declared in policies/catalog.py."""

from __future__ import annotations

from aiohttp import web

from magnetar.broker.admin.base import HttpError, no_content, topic_from_path
from magnetar.broker.compaction.state import CompactionRunning, TopicCompaction
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

    path = "/admin/v2/{domain}/{tenant}/{namespace}/{topic}/compaction"
    return [web.put(path, trigger), web.get(path, status)]
