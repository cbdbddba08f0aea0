"""Admin v2 topic calls beside the per-topic basics, as Pulsar serves them:

- permissions on one topic: GET (the namespace's grants united with the
  topic's), POST /{role} (a list of actions), DELETE /{role} (412 when the
  role has no grant on the topic itself); kept in the namespace policies'
  `auth_policies.destination_auth` keyed by the topic's full name, where
  Pulsar keeps them and broker/auth/authorization.py reads them;
- POST subscription/{sub}/expireMessages with a ResetCursorData body:
  expire (acknowledge) up to that message id;
- on a partitioned topic: POST terminate/partitions (partition index ->
  last message id), POST createMissedPartitions, GET
  partitioned-internalStats (PartitionedManagedLedgerInfo).

Each calls what the single-topic routes call (service.terminate_topic,
topic_ops.internal_stats, StoredSubscription.skip_entries); in cluster mode a
partition another broker serves is asked of that broker's own route.
"""

from __future__ import annotations

from typing import Any

import aiohttp
from aiohttp import web

from magnetar.broker.admin.base import (
    HttpError,
    caller_credentials,
    json_body,
    no_content,
    stored_subscription,
    topic_from_path,
)
from magnetar.broker.admin.permissions import actions_from_body
from magnetar.broker.admin.topic_ops import REMOTE_STATS_TIMEOUT_S, internal_stats
from magnetar.broker.auth.authorization import namespace_grants, topic_grants
from magnetar.broker.service.broker_service import BrokerService
from magnetar.broker.storage.api import Position
from magnetar.broker.topics.base import StoredSubscription, is_persistent
from magnetar.proto.naming import TopicName


def _reset_cursor_data(body: object) -> tuple[Position, bool]:
    """Pulsar's ResetCursorData: `{"ledgerId", "entryId", "isExcluded"?}`."""
    if not isinstance(body, dict):
        raise HttpError(400, f"the body must be a message id object, got {body!r}")
    ledger, entry = body.get("ledgerId"), body.get("entryId")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (ledger, entry)):
        raise HttpError(400, "a message id needs integer ledgerId and entryId")
    excluded = body.get("isExcluded", body.get("excluded", False))
    if not isinstance(excluded, bool):
        raise HttpError(400, f"isExcluded must be true or false, got {excluded!r}")
    assert isinstance(ledger, int) and isinstance(entry, int)
    return Position(ledger, entry), excluded


def _unacked_up_to(sub: StoredSubscription, target: Position) -> int:
    """How many unacknowledged entries lie after the mark-delete position up
    to `target` (inclusive): what skip_entries must skip to reach it."""
    cursor, ledger = sub.cursor, sub.ledger
    position = cursor.mark_delete_position
    end = min(target, ledger.last_confirmed_position)
    count = 0
    while position < end:
        position = ledger.next_position(position)
        if not cursor.is_deleted(position):
            count += 1
    return count


def routes(service: BrokerService) -> list[web.RouteDef]:
    resources = service.resources

    async def check_exists(name: TopicName) -> None:
        """404 unless the topic (or a partition's partitioned topic) is known,
        as Pulsar checks before an ACL change (allowAclChangesOnNonExistentTopics off)."""
        known = set(await service.namespace_topics(name.tenant, name.namespace))
        if not {str(name), str(name.partitioned_base)} & known:
            raise HttpError(404, f"Topic {name} does not exist")

    async def partitions_of(name: TopicName) -> list[TopicName]:
        """A partitioned topic's partitions; 404 for any other name."""
        count = await service.partitioned_metadata(str(name)) if name.partition_index < 0 else 0
        if count == 0:
            raise HttpError(404, f"Partitioned Topic not found: {name} is not a partitioned topic")
        return [name.partition(i) for i in range(count)]

    async def on_owner(
        request: web.Request, partition: TopicName, method: str, suffix: str
    ) -> tuple[int, Any] | None:
        """Cluster mode: the answer of the broker serving `partition` to its
        own route (with the caller's credentials); None when it is this one."""
        if service.ownership is None:
            return None
        url = await service.ownership.served_elsewhere(partition)
        if url is None:
            return None
        target = f"{url}/admin/v2/{partition.rest_path}{suffix}"
        timeout = aiohttp.ClientTimeout(total=REMOTE_STATS_TIMEOUT_S)
        try:
            async with (
                aiohttp.ClientSession(timeout=timeout) as http,
                http.request(method, target, headers=caller_credentials(request)) as answer,
            ):
                body = await answer.json() if answer.content_length else None
                return answer.status, body
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise HttpError(503, f"{partition}: its broker {url} did not answer: {exc}") from exc

    # ------------------------------------------------------------ permissions

    async def get_permissions(request: web.Request) -> web.Response:
        name = topic_from_path(request)
        await check_exists(name)
        policies = await resources.get_policies(name.tenant, name.namespace)
        merged = {role: set(actions) for role, actions in namespace_grants(policies).items()}
        for role, actions in topic_grants(policies, str(name)).items():
            merged.setdefault(role, set()).update(actions)
        return web.json_response({role: sorted(a) for role, a in merged.items()})

    async def update_grants(name: TopicName, role: str, actions: list[str] | None) -> bool:
        """Set (or with None remove) a role's grant on one topic; whether it
        had one."""
        policies: dict[str, Any] = dict(await resources.get_policies(name.tenant, name.namespace))
        auth = dict(policies.get("auth_policies") or {})
        per_topic = dict(auth.get("destination_auth") or {})
        grants = topic_grants(policies, str(name))
        had = role in grants
        if actions is None:
            grants.pop(role, None)
        else:
            grants[role] = actions
        if grants:
            per_topic[str(name)] = grants
        else:
            per_topic.pop(str(name), None)
        auth["destination_auth"] = per_topic
        policies["auth_policies"] = auth
        await resources.set_policies(name.tenant, name.namespace, policies)
        return had

    async def grant(request: web.Request) -> web.Response:
        name = topic_from_path(request)
        actions = actions_from_body(await json_body(request))
        await check_exists(name)
        await update_grants(name, request.match_info["role"], actions)
        return no_content()

    async def revoke(request: web.Request) -> web.Response:
        """Pulsar drops the role from each partition's grants, then from the
        topic's, which must have it."""
        name = topic_from_path(request)
        role = request.match_info["role"]
        await check_exists(name)
        policies = await resources.get_policies(name.tenant, name.namespace)
        if role not in topic_grants(policies, str(name)):
            raise HttpError(412, "Permissions are not set at the topic level")
        count = await resources.get_partitions(name) if name.partition_index < 0 else 0
        for i in range(count):
            if role in topic_grants(policies, str(name.partition(i))):
                await update_grants(name.partition(i), role, None)
        await update_grants(name, role, None)
        return no_content()

    # --------------------------------------------------------- expire to an id

    async def expire_to_id(request: web.Request) -> web.Response:
        """Acknowledge every entry up to the message id (excluded with
        isExcluded), as Pulsar's expireMessages by position moves the
        mark-delete position; a position at or before it changes nothing."""
        target, excluded = _reset_cursor_data(await json_body(request))
        sub = await stored_subscription(service, request)
        if excluded:
            target = sub.ledger.previous_position(target)
        sub.skip_entries(_unacked_up_to(sub, target))
        return no_content()

    # ------------------------------------------------------ partitioned topics

    async def terminate_partitions(request: web.Request) -> web.Response:
        """Terminate each partition; Pulsar's map of partition index to the
        last message id (the single terminate's MessageIdImpl JSON)."""
        name = topic_from_path(request)
        if name.partition_index < 0 and await resources.get_partitions(name) == 0:
            await service.check_namespace(name)
            raise HttpError(
                405,
                "Termination of a non-partitioned topic is not allowed using "
                "partitioned-terminate, please use terminate commands.",
            )
        found: dict[str, Any] = {}
        for partition in await partitions_of(name):
            remote = await on_owner(request, partition, "POST", "/terminate")
            if remote is not None:
                if remote[0] != 200:
                    raise HttpError(remote[0], f"terminate {partition}: {remote[1]}")
                found[str(partition.partition_index)] = remote[1]
                continue
            last = await service.terminate_topic(str(partition))
            found[str(partition.partition_index)] = {
                "ledgerId": last.ledger_id,
                "entryId": last.entry_id,
                "partitionIndex": partition.partition_index,
            }
        return web.json_response(found)

    async def create_missed_partitions(request: web.Request) -> web.Response:
        """Create the partitions not created yet (a partition is created on
        first use); a non-persistent partition has nothing to create."""
        name = topic_from_path(request)
        partitions = await partitions_of(name)
        if not name.persistent:
            return no_content()
        known = set(await service.namespace_topics(name.tenant, name.namespace))
        for partition in partitions:
            if str(partition) in known:
                continue
            remote = await on_owner(request, partition, "PUT", "")
            if remote is None:
                await service.get_topic(str(partition), create=True)
            elif remote[0] not in (204, 409):  # 409: created meanwhile
                raise HttpError(remote[0], f"create {partition}: {remote[1]}")
        return no_content()

    async def partitioned_internal_stats(request: web.Request) -> web.Response:
        """Pulsar's PartitionedManagedLedgerInfo: the partition count and each
        partition's internalStats."""
        name = topic_from_path(request)
        partitions = await partitions_of(name)
        per_partition: dict[str, Any] = {}
        for partition in partitions:
            remote = await on_owner(request, partition, "GET", "/internalStats")
            if remote is not None:
                if remote[0] != 200:
                    raise HttpError(remote[0], f"internalStats of {partition}: {remote[1]}")
                per_partition[str(partition)] = remote[1]
                continue
            topic = await service.get_topic(str(partition))
            if not is_persistent(topic):
                raise HttpError(405, f"{name} is not a persistent topic")
            per_partition[str(partition)] = internal_stats(topic)
        return web.json_response(
            {"metadata": {"partitions": len(partitions)}, "partitions": per_partition}
        )

    path = "/admin/v2/{domain}/{tenant}/{namespace}/{topic}"
    return [
        web.get(f"{path}/permissions", get_permissions),
        web.post(f"{path}/permissions/{{role}}", grant),
        web.delete(f"{path}/permissions/{{role}}", revoke),
        web.post(f"{path}/subscription/{{subscription}}/expireMessages", expire_to_id),
        web.post(f"{path}/terminate/partitions", terminate_partitions),
        web.post(f"{path}/createMissedPartitions", create_missed_partitions),
        web.get(f"{path}/partitioned-internalStats", partitioned_internal_stats),
    ]
