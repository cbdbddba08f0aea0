"""Admin v2 backlog operations and inspection: skip N, clear backlog (skip_all),
expire messages (one subscription or all), internalStats and
partitioned-stats (in cluster mode it asks each partition's owner for that
partition's stats). Peeking at messages is in messages.py.

The backlog operations are StoredSubscription's own (skip_entries,
clear_backlog, expire_messages: the same mark-delete move a cumulative ack
makes); internalStats reads the managed ledger and its cursors.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import aiohttp
from aiohttp import web

from magnetar.broker.admin.base import (
    HttpError,
    caller_credentials,
    no_content,
    stored_subscription,
    stored_topic,
    topic_from_path,
)
from magnetar.broker.admin.subscriptions import topic_stats
from magnetar.broker.service.broker_service import BrokerService
from magnetar.broker.topics.base import StoredSubscription, StoredTopic, is_persistent
from magnetar.proto.naming import TopicName

# What partitioned-stats adds up over the partitions (Pulsar's field names).
_SUMMED_TOPIC_FIELDS = (
    "msgRateIn",
    "msgThroughputIn",
    "msgRateOut",
    "msgThroughputOut",
    "msgInCounter",
    "bytesInCounter",
    "msgOutCounter",
    "bytesOutCounter",
    "storageSize",
    "backlogSize",
)
_SUMMED_SUBSCRIPTION_FIELDS = (
    "msgBacklog",
    "unackedMessages",
    "msgRateOut",
    "msgThroughputOut",
    "msgRateRedeliver",
    "msgDelayed",
)


REMOTE_STATS_TIMEOUT_S = 30.0


async def _remote_stats(
    http: aiohttp.ClientSession, url: str, partition: TopicName, request: web.Request
) -> dict[str, Any]:
    """A partition's stats from the broker serving it (cluster mode), asked
    with the caller's credentials."""
    p = partition
    path = f"/admin/v2/{p.domain}/{p.tenant}/{p.namespace}/{p.local_name}/stats"
    try:
        async with http.get(url + path, headers=caller_credentials(request)) as answer:
            if answer.status != 200:
                why = await answer.text()
                raise HttpError(answer.status, f"stats of {p} from {url}: {why}")
            stats: dict[str, Any] = await answer.json()
            return stats
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise HttpError(503, f"stats of {p}: its broker {url} did not answer: {exc}") from exc


def _count(raw: str, what: str) -> int:
    if not raw.isdigit():
        raise HttpError(400, f"{what} must be a non-negative integer, got {raw!r}")
    return int(raw)


def internal_stats(topic: StoredTopic) -> dict[str, Any]:
    """PersistentTopicInternalStats' fields that this storage has."""
    ledger = topic.ledger
    ledgers = [
        {"ledgerId": info.ledger_id, "entries": info.entries, "size": info.size}
        for info in ledger.ledger_summaries()
    ]
    cursors = {
        c.name: {
            "markDeletePosition": str(c.mark_delete_position),
            "readPosition": str(c.read_position),
            "numberOfEntriesSinceFirstNotAckedMessage": c.backlog_entries,
            "isDurable": c.is_durable,
            "properties": dict(c.properties),
        }
        for c in ledger.cursors
    }
    return {
        "numberOfEntries": ledger.number_of_entries,
        "totalSize": ledger.total_size,
        "lastConfirmedEntry": str(ledger.last_confirmed_position),
        "ledgers": ledgers,
        "cursors": cursors,
    }


def routes(service: BrokerService, clock: Callable[[], float] = time.time) -> list[web.RouteDef]:
    async def persistent_topic(request: web.Request, *, create: bool = False) -> StoredTopic:
        return await stored_topic(service, request, create=create)

    async def subscription(request: web.Request) -> StoredSubscription:
        return await stored_subscription(service, request)

    async def skip(request: web.Request) -> web.Response:
        count = _count(request.match_info["count"], "the number of messages")
        (await subscription(request)).skip_entries(count)
        return no_content()

    async def skip_all(request: web.Request) -> web.Response:
        (await subscription(request)).clear_backlog()
        return no_content()

    def _cutoff(request: web.Request) -> int:
        seconds = _count(request.match_info["seconds"], "the expire time in seconds")
        return int((clock() - seconds) * 1000)

    async def expire(request: web.Request) -> web.Response:
        await (await subscription(request)).expire_messages(_cutoff(request))
        return no_content()

    async def expire_all(request: web.Request) -> web.Response:
        topic = await persistent_topic(request)
        cutoff = _cutoff(request)
        for name in topic.subscription_names():
            await (await topic.get_subscription(name)).expire_messages(cutoff)
        return no_content()

    async def internal(request: web.Request) -> web.Response:
        return web.json_response(internal_stats(await persistent_topic(request)))

    async def partitioned_stats(request: web.Request) -> web.Response:
        name = topic_from_path(request)
        partitions = await service.partitioned_metadata(str(name))
        if partitions == 0:
            raise HttpError(404, f"{name} is not a partitioned topic")
        timeout = aiohttp.ClientTimeout(total=REMOTE_STATS_TIMEOUT_S)
        async with aiohttp.ClientSession(timeout=timeout) as http:

            async def stats_of(partition: TopicName) -> dict[str, Any]:
                if service.ownership is not None:
                    url = await service.ownership.served_elsewhere(partition)
                    if url is not None:
                        return await _remote_stats(http, url, partition, request)
                topic = await service.get_topic(str(partition))
                if not is_persistent(topic):
                    raise HttpError(405, f"{name} is not a persistent topic")
                return await topic_stats(topic)

            names = [name.partition(i) for i in range(partitions)]
            found = await asyncio.gather(*map(stats_of, names))
        per_partition: dict[str, Any] = {}
        merged: dict[str, dict[str, Any]] = {}
        publishers: list[Any] = []
        totals: dict[str, float] = dict.fromkeys(_SUMMED_TOPIC_FIELDS, 0)
        for partition, stats in zip(names, found, strict=True):
            per_partition[str(partition)] = stats
            publishers.extend(stats["publishers"])
            for key in _SUMMED_TOPIC_FIELDS:
                totals[key] += stats[key]
            for sub_name, sub in stats["subscriptions"].items():
                into = merged.setdefault(
                    sub_name, {**dict.fromkeys(_SUMMED_SUBSCRIPTION_FIELDS, 0), "consumers": []}
                )
                for key in _SUMMED_SUBSCRIPTION_FIELDS:
                    into[key] += sub[key]
                into["consumers"].extend(sub["consumers"])
        body: dict[str, Any] = {
            **totals,
            "metadata": {"partitions": partitions},
            "publishers": publishers,
            "subscriptions": merged,
        }
        if request.query.get("perPartition", "true").lower() != "false":
            body["partitions"] = per_partition
        return web.json_response(body)

    path = "/admin/v2/{domain}/{tenant}/{namespace}/{topic}"
    sub = f"{path}/subscription/{{subscription}}"
    return [
        web.post(f"{sub}/skip/{{count}}", skip),
        web.post(f"{sub}/skip_all", skip_all),
        web.post(f"{sub}/expireMessages/{{seconds}}", expire),
        web.post(f"{path}/all_subscription/expireMessages/{{seconds}}", expire_all),
        web.get(f"{path}/internalStats", internal),
        web.get(f"{path}/partitioned-stats", partitioned_stats),
    ]
