"""Admin v2 calls on one persistent topic's managed ledger, as Pulsar serves them:

- POST trim: the retention trim the expiry sweep runs, now (204);
- GET internal-info: Pulsar's ManagedLedgerInfo (ledgers, cursors with their
  mark-delete and individually deleted ranges, terminated position);
- POST subscription/{sub}/analyzeBacklog: Pulsar's
  AnalyzeSubscriptionBacklogResult, counted by reading the subscription's
  unacknowledged entries (no entry filters here: every entry is accepted);
- PUT backlogSize (a message id body): the estimated bytes from that
  position to the end (Pulsar's getBacklogSizeByMessageId);
- GET backlog: Pulsar's PersistentOfflineTopicStats;
- DELETE truncate: every subscription's backlog cleared, then every ledger
  but the current one deleted whatever the retention (Pulsar's
  ManagedLedger.asyncTruncate); Pulsar refuses nothing here beyond the
  usual topic checks, and neither does this.

Non-persistent topics store nothing: 405, as Pulsar answers.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aiohttp import web

from magnetar.broker.admin.base import (
    HttpError,
    json_body,
    no_content,
    stored_topic,
    topic_from_path,
)
from magnetar.broker.admin.topic_ops import internal_stats
from magnetar.broker.features.markers import has_marker_tag, marker_type
from magnetar.broker.service.broker_service import BrokerService
from magnetar.broker.storage.api import ManagedCursor, ManagedLedger, Position
from magnetar.broker.topics.base import StoredTopic

# Pulsar's subscriptionBacklogScanMaxEntries default: a scan stops there
# and answers aborted=true.
SCAN_MAX_ENTRIES = 10_000
_SCAN_BATCH = 500
# internal-info walks the backlog for individually deleted entries; a bound
# on that walk keeps one admin call from stalling the loop on a huge backlog.
MAX_DELETED_SCAN = 200_000
_YIELD_EVERY = 5_000


def _position(body: object, what: str) -> Position:
    """A message id body (`{"ledgerId", "entryId", ...}`) as a position."""
    if not isinstance(body, dict):
        raise HttpError(400, f"{what} must be a message id object, got {body!r}")
    ledger, entry = body.get("ledgerId"), body.get("entryId")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (ledger, entry)):
        raise HttpError(400, f"{what} needs integer ledgerId and entryId")
    assert isinstance(ledger, int) and isinstance(entry, int)
    return Position(ledger, entry)


def _position_info(position: Position) -> dict[str, int]:
    return {"ledgerId": position.ledger_id, "entryId": position.entry_id}


def _ms(seconds: float | None) -> int | None:
    return None if seconds is None else int(seconds * 1000)


async def deleted_ranges(ledger: ManagedLedger, cursor: ManagedCursor) -> list[dict[str, Any]]:
    """The cursor's individually deleted entries after its mark-delete, as
    Pulsar's MessageRangeInfo list (open-closed ranges: `from` is the entry
    before the first deleted one)."""
    ranges: list[dict[str, Any]] = []
    end = ledger.last_confirmed_position
    position = cursor.mark_delete_position
    first: Position | None = None
    last = position
    for scanned in range(MAX_DELETED_SCAN):
        if position >= end:
            break
        position = ledger.next_position(position)
        if cursor.is_deleted(position):
            if first is None:
                first = position
            last = position
        elif first is not None:
            ranges.append(_range(ledger, first, last))
            first = None
        if scanned % _YIELD_EVERY == _YIELD_EVERY - 1:
            await asyncio.sleep(0)
    if first is not None:
        ranges.append(_range(ledger, first, last))
    return ranges


def _range(ledger: ManagedLedger, first: Position, last: Position) -> dict[str, Any]:
    start = _position_info(ledger.previous_position(first))
    return {"from": start, "to": _position_info(last), "offloaded": False}


async def managed_ledger_info(topic: StoredTopic) -> dict[str, Any]:
    """Pulsar's ManagedLedgerInfo from what the ledger and its cursors show
    (their metadata versions and dates are the store's, not shown here)."""
    ledger = topic.ledger
    stats = internal_stats(topic)
    ledgers = [
        {
            "ledgerId": s.ledger_id,
            "entries": s.entries,
            "size": s.size,
            "timestamp": _ms(s.closed_at),
            "isOffloaded": False,
        }
        for s in ledger.ledger_summaries()
    ]
    cursors: dict[str, Any] = {}
    for cursor in ledger.cursors:
        if not cursor.is_durable:
            continue  # Pulsar stores only durable cursors
        cursors[cursor.name] = {
            # Cursor state lives in the metadata store, not in a ledger:
            # Pulsar's -1.
            "cursorsLedgerId": -1,
            "markDelete": _position_info(cursor.mark_delete_position),
            "individualDeletedMessages": await deleted_ranges(ledger, cursor),
            "properties": stats["cursors"][cursor.name]["properties"],
        }
    info: dict[str, Any] = {"ledgers": ledgers, "cursors": cursors}
    if topic.terminated_at is not None:
        info["terminatedPosition"] = _position_info(topic.terminated_at)
    return info


async def analyze_backlog(
    ledger: ManagedLedger, cursor: ManagedCursor, start: Position | None
) -> dict[str, Any]:
    """AnalyzeSubscriptionBacklogResult: the unacknowledged entries from
    `start` (default: after the mark-delete position) to the end, read and
    counted (a batch counts its messages), at most SCAN_MAX_ENTRIES."""
    end = ledger.last_confirmed_position
    position = ledger.next_position(cursor.mark_delete_position) if start is None else start
    entries = messages = markers = 0
    first: Position | None = None
    last: Position | None = None
    aborted = False
    while position <= end and not aborted:
        batch = await ledger.read_entries(position, _SCAN_BATCH)
        if not batch:
            break
        for entry in batch:
            if entry.position > end:
                break
            if cursor.is_deleted(entry.position):
                continue
            if entries == SCAN_MAX_ENTRIES:
                aborted = True
                break
            entries += 1
            messages += entry.num_messages
            if has_marker_tag(entry.data) and marker_type(entry.data):
                markers += 1
            if first is None:
                first = entry.position
            last = entry.position
        position = ledger.next_position(batch[-1].position)
    first_id = None if first is None else str(first)
    last_id = None if last is None else str(last)
    return {
        "entries": entries,
        "messages": messages,
        # Replicated subscriptions' markers (issue 45.4); no transactions.
        "markerMessages": markers,
        "filterAcceptedEntries": entries,
        "filterAcceptedMessages": messages,
        "filterRejectedEntries": 0,
        "filterRejectedMessages": 0,
        "filterRescheduledEntries": 0,
        "filterRescheduledMessages": 0,
        "aborted": aborted,
        # Pulsar 3's names, then Pulsar 4's.
        "firstMessageId": first_id,
        "lastMessageId": last_id,
        "firstPosition": first_id,
        "lastPosition": last_id,
    }


def estimated_backlog_size(ledger: ManagedLedger, position: Position) -> int:
    """Bytes from `position` (inclusive) to the end: whole ledgers after its
    ledger, and its ledger's share by entry count (Pulsar's
    getEstimatedBacklogSize estimates within a ledger the same way)."""
    total = 0
    for summary in ledger.ledger_summaries():
        if summary.ledger_id > position.ledger_id:
            total += summary.size
        elif summary.ledger_id == position.ledger_id and summary.entries > 0:
            remaining = max(summary.entries - max(position.entry_id, 0), 0)
            total += summary.size * remaining // summary.entries
    return total


def offline_stats(topic: StoredTopic, broker_name: str, now_ms: int) -> dict[str, Any]:
    """PersistentOfflineTopicStats: Pulsar counts entries here, and the
    message backlog is the largest cursor backlog."""
    ledger = topic.ledger
    details = [
        {
            "ledgerId": s.ledger_id,
            "entries": s.entries,
            "size": s.size,
            "timestamp": _ms(s.closed_at) or 0,
        }
        for s in ledger.ledger_summaries()
    ]
    cursors = {
        c.name: {"cursorBacklog": c.backlog_entries, "cursorLedgerId": -1}
        for c in ledger.cursors
        if c.is_durable
    }
    return {
        "storageSize": sum(d["size"] for d in details),
        "totalMessages": ledger.number_of_entries,
        "messageBacklog": max((c["cursorBacklog"] for c in cursors.values()), default=0),
        "brokerName": broker_name,
        "topicName": topic.name,
        "dataLedgerDetails": details,
        "cursorDetails": cursors,
        "statGeneratedAt": now_ms,
    }


async def truncate(topic: StoredTopic) -> None:
    """Clear every subscription's backlog, persist the cursors (trimming
    goes by persisted mark-deletes), then delete every ledger but the
    current one, retention aside, as Pulsar's truncate does."""
    ledger = topic.ledger
    for name in topic.subscription_names():
        (await topic.get_subscription(name)).clear_backlog()
    for cursor in list(ledger.cursors):
        if cursor.is_durable:
            await cursor.flush()
    config = ledger.config
    kept = (config.retention_time_s, config.retention_size_bytes)
    ledger.set_retention(0, 0)
    try:
        await ledger.trim_consumed_ledgers()
    finally:
        # Unless a policy change set a new retention meanwhile.
        now = ledger.config
        if (now.retention_time_s, now.retention_size_bytes) == (0, 0):
            ledger.set_retention(*kept)


def routes(service: BrokerService) -> list[web.RouteDef]:
    async def persistent(request: web.Request, refusal: str) -> StoredTopic:
        """The persistent topic of the path; 405 before any lookup for a
        non-persistent one."""
        name = topic_from_path(request)
        if not name.persistent:
            raise HttpError(405, refusal)
        return await stored_topic(service, request)

    async def trim(request: web.Request) -> web.Response:
        topic = await persistent(request, "Trim on a non-persistent topic is not allowed")
        await topic.ledger.trim_consumed_ledgers()
        return no_content()

    async def internal_info(request: web.Request) -> web.Response:
        topic = await persistent(request, "Internal info of a non-persistent topic is not allowed")
        return web.json_response(await managed_ledger_info(topic))

    async def analyze(request: web.Request) -> web.Response:
        refusal = "Analyze backlog on a non-persistent topic is not allowed"
        body = await json_body(request)
        start = None if body is None else _position(body, "the start position")
        topic = await persistent(request, refusal)
        sub = await topic.get_subscription(request.match_info["subscription"])
        return web.json_response(await analyze_backlog(sub.ledger, sub.cursor, start))

    async def backlog_size(request: web.Request) -> web.Response:
        refusal = "Get backlog size on a non-persistent topic is not allowed"
        position = _position(await json_body(request), "the body")
        topic = await persistent(request, refusal)
        return web.json_response(estimated_backlog_size(topic.ledger, position))

    async def backlog(request: web.Request) -> web.Response:
        refusal = "Offline backlog of a non-persistent topic is not allowed"
        topic = await persistent(request, refusal)
        now_ms = int(time.time() * 1000)
        return web.json_response(offline_stats(topic, service.config.advertised_host, now_ms))

    async def truncate_topic(request: web.Request) -> web.Response:
        await truncate(await persistent(request, "Unsupported truncate"))
        return no_content()

    path = "/admin/v2/{domain}/{tenant}/{namespace}/{topic}"
    return [
        web.post(f"{path}/trim", trim),
        web.get(f"{path}/internal-info", internal_info),
        web.post(f"{path}/subscription/{{subscription}}/analyzeBacklog", analyze),
        web.put(f"{path}/backlogSize", backlog_size),
        web.get(f"{path}/backlog", backlog),
        web.delete(f"{path}/truncate", truncate_topic),
    ]
