"""Admin v2 for one topic and its subscriptions: create (non-partitioned),
stats, subscriptions list / create at a position / delete, reset cursor (to
a publish time or a message id) and unload. (lastMessageId is with the other
message lookups, in messages.py.)

Every handler calls the StoredTopic / StoredSubscription methods the
wire uses (reset_cursor, stats); JSON field names are Pulsar's (TopicStats,
SubscriptionStats, ConsumerStats, MessageIdImpl).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from magnetar.broker.admin.base import (
    HttpError,
    json_body,
    no_content,
    partition_names,
    stored_subscription,
    stored_topic,
    topic_from_path,
)
from magnetar.broker.counters import rate_stats
from magnetar.broker.features.markers import is_replicated, mark_replicated, unmark_replicated
from magnetar.broker.policies.backlog_quota import backlog_bytes
from magnetar.broker.service.broker_service import BrokerService
from magnetar.broker.storage.api import EARLIEST, LATEST, Position
from magnetar.broker.topics.base import StoredSubscription, StoredTopic, Topic, is_persistent


def _message_id(body: object, *, default: Position | None = None) -> Position:
    """Pulsar's MessageIdImpl JSON `{"ledgerId": L, "entryId": E}`."""
    if body is None and default is not None:
        return default
    if not isinstance(body, dict):
        raise HttpError(400, f"the body must be a message id object, got {body!r}")
    ledger, entry = body.get("ledgerId"), body.get("entryId")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (ledger, entry)):
        raise HttpError(400, "a message id needs integer ledgerId and entryId")
    assert isinstance(ledger, int) and isinstance(entry, int)
    return Position(ledger, entry)


def _subscription_stats(sub: StoredSubscription) -> dict[str, Any]:
    """SubscriptionStats; rates are those of the last stats update."""
    stats = sub.stats()
    consumers = [
        {
            "consumerName": c.name,
            "availablePermits": c.permits,
            "unackedMessages": c.unacked_messages,
            "blockedConsumerOnUnackedMsgs": c.blocked,
            **rate_stats(c.dispatched, "Out"),
            "address": str(c.address),
            "clientVersion": c.cnx.client_version,
        }
        for c in sub.consumers
    ]
    return {
        "msgBacklog": stats.msg_backlog,
        "type": stats.type_name,
        "isDurable": stats.is_durable,
        # Replicated subscriptions (issue 45.4): the consumer asked for it.
        "isReplicated": is_replicated(sub.cursor),
        "unackedMessages": sum(c["unackedMessages"] for c in consumers),
        **rate_stats(sub.dispatched, "Out"),
        "msgRateRedeliver": sub.redelivered.msg_rate,
        "msgDelayed": sub.delayed_messages,
        "blockedSubscriptionOnUnackedMsgs": sub.blocked_on_unacked,
        "consumers": consumers,
    }


def traffic_stats(topic: Topic) -> dict[str, Any]:
    """TopicStats' fields any topic has: rates and counters in and out, and
    its publishers."""
    return {
        **rate_stats(topic.published, "In"),
        **rate_stats(topic.dispatched, "Out"),
        "publishers": [
            {
                "producerName": p.name,
                "producerId": p.producer_id,
                "accessMode": p.access_mode,
                "address": p.cnx.address,
                "clientVersion": p.cnx.client_version,
            }
            for p in list(topic.producers.values())
        ],
    }


async def topic_stats(topic: StoredTopic) -> dict[str, Any]:
    """TopicStats' fields: traffic, per-subscription stats, storage size and
    backlog."""
    subs = {
        n: _subscription_stats(await topic.get_subscription(n)) for n in topic.subscription_names()
    }
    return {
        **traffic_stats(topic),
        "subscriptions": subs,
        "storageSize": topic.ledger.total_size,
        "backlogSize": backlog_bytes(topic.ledger),
    }


def routes(service: BrokerService) -> list[web.RouteDef]:
    async def persistent_topic(request: web.Request, *, create: bool = False) -> StoredTopic:
        return await stored_topic(service, request, create=create)

    async def subscription(request: web.Request) -> StoredSubscription:
        return await stored_subscription(service, request)

    async def create_topic(request: web.Request) -> web.Response:
        name = topic_from_path(request)
        # Pulsar's 409 texts: scripts match on them to tolerate leftovers.
        if await service.partitioned_metadata(str(name)) > 0:
            raise HttpError(409, f"This topic already exists: {name} is a partitioned topic")
        if str(name) in service.topics or str(name) in await service.namespace_topics(
            name.tenant, name.namespace
        ):
            raise HttpError(409, "This topic already exists")
        # Created even where automatic creation is off, as Pulsar's admin does.
        topic = await service.get_topic(str(name), explicit=True)
        if is_persistent(topic):
            # 204 means created: its record is stored, not only queued.
            await topic.ledger.wait_first_record()
        return no_content()

    async def stats(request: web.Request) -> web.Response:
        topic = await persistent_topic(request)
        found = await topic_stats(topic)
        # Pulsar's ReplicatorStats, by remote cluster (geo-replication).
        found["replication"] = {
            remote: replicator.stats()
            for remote, replicator in service.replicators.of(topic.name).items()
        }
        return web.json_response(found)

    async def list_subscriptions(request: web.Request) -> web.Response:
        names = {n for topic in await topics_of(request) for n in topic.subscription_names()}
        return web.json_response(sorted(names))

    async def topics_of(request: web.Request, *, create: bool = False) -> list[StoredTopic]:
        """The topic, or every partition of a partitioned topic (as Pulsar
        applies subscription calls on a base name to each partition)."""
        partitions = await partition_names(service, topic_from_path(request))
        if not partitions:
            return [await persistent_topic(request, create=create)]
        loaded = [await service.get_topic(p, create=create) for p in partitions]
        return [t for t in loaded if is_persistent(t)]

    async def create_subscription(request: web.Request) -> web.Response:
        topics = await topics_of(request, create=True)
        name = request.match_info["subscription"]
        for topic in topics:
            if name in topic.subscription_names():
                raise HttpError(409, f"Subscription already exists for topic {topic.name}")
        start = _message_id(await json_body(request), default=LATEST)
        if start.ledger_id < 0:
            start = EARLIEST
        for topic in topics:
            await topic.create_subscription(name, start)
        return no_content()

    async def delete_subscription(request: web.Request) -> web.Response:
        for topic in await topics_of(request):
            await topic.delete_subscription(request.match_info["subscription"])
        return no_content()

    async def reset_to_time(request: web.Request) -> web.Response:
        raw = request.match_info["timestamp"]
        if not raw.isdigit():
            raise HttpError(400, f"the timestamp must be milliseconds since the epoch: {raw!r}")
        await (await subscription(request)).reset_cursor_to_time(int(raw))
        return no_content()

    async def reset_to_id(request: web.Request) -> web.Response:
        target = _message_id(await json_body(request))
        await (await subscription(request)).reset_cursor(target)
        return no_content()

    async def replicated_status(request: web.Request) -> web.Response:
        """Whether the subscription is replicated (issue 45.4), by topic
        (each partition of a partitioned one), as Pulsar answers."""
        name = request.match_info["subscription"]
        found = {}
        for topic in await topics_of(request):
            sub = await topic.get_subscription(name)
            found[topic.name] = is_replicated(sub.cursor)
        return web.json_response(found)

    async def set_replicated_status(request: web.Request) -> web.Response:
        """Pulsar's set-replicated-subscription-status: the body is true or
        false; every partition of a partitioned topic follows."""
        enabled = await json_body(request)
        if not isinstance(enabled, bool):
            raise HttpError(400, f"the body must be true or false, got {enabled!r}")
        name = request.match_info["subscription"]
        subs = [await topic.get_subscription(name) for topic in await topics_of(request)]
        for sub in subs:
            (mark_replicated if enabled else unmark_replicated)(sub.cursor)
        return no_content()

    async def unload(request: web.Request) -> web.Response:
        """Close the topic (every partition of a partitioned one); clients
        reconnect and it loads again on their lookup."""
        name = topic_from_path(request)
        names = await partition_names(service, name) or [str(name)]
        for one in names:
            topic = service.topics.pop(one, None)
            if topic is None and one == str(name):
                await persistent_topic(request)  # 404 when it does not exist at all
                topic = service.topics.pop(one, None)
            if topic is not None:
                await topic.close(notify_clients=True)
        return no_content()

    path = "/admin/v2/{domain}/{tenant}/{namespace}/{topic}"
    sub = f"{path}/subscription/{{subscription}}"
    return [
        web.put(path, create_topic),
        web.get(f"{path}/stats", stats),
        web.get(f"{path}/subscriptions", list_subscriptions),
        web.put(sub, create_subscription),
        web.delete(sub, delete_subscription),
        web.post(f"{sub}/resetcursor/{{timestamp}}", reset_to_time),
        web.post(f"{sub}/resetcursor", reset_to_id),
        web.get(f"{sub}/replicatedSubscriptionStatus", replicated_status),
        web.post(f"{sub}/replicatedSubscriptionStatus", set_replicated_status),
        web.put(f"{path}/unload", unload),
    ]
