"""Admin v2 message lookups on a persistent topic, as Pulsar serves them:

- GET .../lastMessageId: the newest entry's id (MessageIdImpl JSON; a batch's
  adds batchIndex, its last message's index);
- GET .../ledger/{ledgerId}/entry/{entryId}: the entry at that position;
- GET .../examinemessage?initialPosition=earliest|latest&messagePosition=N:
  the N-th entry (1-based) from the oldest or the newest end;
- GET .../messageid/{timestamp}: the id of the first entry published at or
  after a time (ms);
- GET .../subscription/{sub}/position/{N}: the N-th unacknowledged entry.

Positions count entries, as Pulsar's do: a batch is one entry and comes back
whole, its message count in X-Pulsar-num-batch-message. An entry answers in
Pulsar's "peek" format (`entry_response`): the payload as the body, the
message metadata in X-Pulsar-* headers (Pulsar's names and value formats).
One difference: Pulsar decompresses the payload and Magnetar's broker never
does, so a compressed entry's body is the stored bytes and its
X-Pulsar-compression / X-Pulsar-uncompressed-size headers say how to undo it.

Where Pulsar refuses a partitioned topic's base name with its own 405
(examine, messageid, peek), so does this; elsewhere base.stored_topic's 409
applies. A non-persistent topic is 405 throughout, as in Pulsar.
"""

from __future__ import annotations

import base64
import re
import uuid
from datetime import UTC, datetime

from aiohttp import web
from multidict import CIMultiDict

from magnetar.broker.admin.base import (
    HttpError,
    partition_names,
    stored_subscription,
    stored_topic,
    topic_from_path,
)
from magnetar.broker.dispatchers.entries import publish_time
from magnetar.broker.service.broker_service import BrokerService
from magnetar.broker.storage.api import EARLIEST, Entry, ManagedLedger, Position
from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.errors import ProtocolError
from magnetar.proto.frames import Payload

# An HTTP header name (RFC 9110 token): a property key that is not one cannot
# be carried in an X-Pulsar-PROPERTY-<key> header.
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")

# Scalar metadata fields written as they are, after the ones formatted apart
# (Pulsar's generateResponseWithEntry, in its order).
_PLAIN_FIELDS = (
    ("producer_name", "X-Pulsar-producer-name"),
    ("sequence_id", "X-Pulsar-sequence-id"),
    ("replicated_from", "X-Pulsar-replicated-from"),
    ("partition_key", "X-Pulsar-partition-key"),
)
_LATER_FIELDS = (
    ("marker_type", "X-Pulsar-marker-type"),
    ("txnid_least_bits", "X-Pulsar-txnid-least-bits"),
    ("txnid_most_bits", "X-Pulsar-txnid-most-bits"),
    ("highest_sequence_id", "X-Pulsar-highest-sequence-id"),
    ("uuid", "X-Pulsar-uuid"),
    ("num_chunks_from_msg", "X-Pulsar-num-chunks-from-msg"),
    ("total_chunk_msg_size", "X-Pulsar-total-chunk-msg-size"),
    ("chunk_id", "X-Pulsar-chunk-id"),
    ("null_partition_key", "X-Pulsar-null-partition-key"),
)


def pulsar_time(ms: int) -> str:
    """A time as Pulsar's DateFormatter writes it (ISO_OFFSET_DATE_TIME in the
    broker's zone): 2024-05-01T12:00:00.25+02:00, Z for UTC; the fraction has
    no trailing zeros and is left out when zero."""
    seconds, millis = divmod(ms, 1000)
    when = datetime.fromtimestamp(seconds, tz=UTC).astimezone()
    text = when.strftime("%Y-%m-%dT%H:%M:%S")
    if millis:
        text += "." + f"{millis:03d}".rstrip("0")
    offset = when.utcoffset()
    total = int(offset.total_seconds()) if offset is not None else 0
    if total == 0:
        return text + "Z"
    sign = "-" if total < 0 else "+"
    hours, rest = divmod(abs(total), 3600)
    minutes, secs = divmod(rest, 60)
    return f"{text}{sign}{hours:02d}:{minutes:02d}" + (f":{secs:02d}" if secs else "")


def _value(value: object) -> str:
    """A header value as Java writes it (booleans lower case); CR and LF would
    end the header (aiohttp refuses them), so they go as spaces."""
    text = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return text.replace("\r", " ").replace("\n", " ")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def entry_response(entry: Entry) -> web.Response:
    """One stored entry in Pulsar's peek format: X-Pulsar-* headers for its id
    and metadata, the payload (as stored) as the body."""
    try:
        payload = Payload.parse(entry.data, verify_checksum=False)
        meta = payload.metadata
    except ProtocolError as exc:
        raise HttpError(500, f"entry {entry.position} cannot be parsed: {exc}") from exc
    # The metadata fields set: proto2 presence, which decides Pulsar's headers.
    present = {field.name for field, _ in meta.ListFields()}
    headers: CIMultiDict[str] = CIMultiDict()
    add = headers.add
    add("X-Pulsar-Message-ID", str(entry.position))
    for prop in meta.properties:
        if _TOKEN.fullmatch(prop.key):
            add(f"X-Pulsar-PROPERTY-{prop.key}", _value(prop.value))
    broker = payload.broker_entry_metadata
    if broker is not None and broker.HasField("broker_timestamp"):
        add("X-Pulsar-Broker-Entry-METADATA-timestamp", pulsar_time(broker.broker_timestamp))
    if broker is not None and broker.HasField("index"):
        add("X-Pulsar-Broker-Entry-METADATA-index", str(broker.index))
    for field, header in (
        ("publish_time", "X-Pulsar-publish-time"),
        ("event_time", "X-Pulsar-event-time"),
        ("deliver_at_time", "X-Pulsar-deliver-at-time"),
    ):
        if field in present:
            add(header, pulsar_time(getattr(meta, field)))
    if "num_messages_in_batch" in present:
        add("X-Pulsar-num-batch-message", str(meta.num_messages_in_batch))
        # Pulsar's figure: the whole entry less the metadata.
        add("X-Pulsar-batch-size", str(len(entry.data) - payload.meta_size))
    if "null_value" in present:
        add("X-Pulsar-null-value", _value(meta.null_value))
    if "num_chunks_from_msg" in present:
        add("X-Pulsar-PROPERTY-TOTAL-CHUNKS", str(meta.num_chunks_from_msg))
        add("X-Pulsar-PROPERTY-CHUNK-ID", str(meta.chunk_id))
    add("X-Pulsar-Is-Encrypted", _value(len(meta.encryption_keys) > 0))
    for field, header in _PLAIN_FIELDS:
        if field in present:
            add(header, _value(getattr(meta, field)))
    for cluster in meta.replicate_to:
        add("X-Pulsar-replicated-to", _value(cluster))
    if "compression" in present:
        add("X-Pulsar-compression", pb.CompressionType.Name(meta.compression))
    if "uncompressed_size" in present:
        add("X-Pulsar-uncompressed-size", str(meta.uncompressed_size))
    if "encryption_algo" in present:
        add("X-Pulsar-encryption-algo", _value(meta.encryption_algo))
    for keys in meta.encryption_keys:
        add("X-Pulsar-Base64-encryption-keys", _b64(keys.SerializeToString()))
    for field, header in (
        ("encryption_param", "X-Pulsar-Base64-encryption-param"),
        ("schema_version", "X-Pulsar-Base64-schema-version"),
    ):
        if field in present:
            add(header, _b64(getattr(meta, field)))
    if "partition_key_b64_encoded" in present:
        add("X-Pulsar-partition-key-b64-encoded", _value(meta.partition_key_b64_encoded))
    if "ordering_key" in present:
        add("X-Pulsar-Base64-ordering-key", _b64(meta.ordering_key))
    for field, header in _LATER_FIELDS:
        if field in present:
            add(header, _value(getattr(meta, field)))
    return web.Response(body=payload.payload, headers=headers)


def message_id(position: Position, partition_index: int, batch_index: int = -1) -> dict[str, int]:
    """Pulsar's MessageIdImpl JSON; a BatchMessageIdImpl's adds batchIndex."""
    body = {
        "ledgerId": position.ledger_id,
        "entryId": position.entry_id,
        "partitionIndex": partition_index,
    }
    if batch_index >= 0:
        body["batchIndex"] = batch_index
    return body


def _integer(raw: str, what: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise HttpError(400, f"{what} must be an integer, got {raw!r}") from None


def _confirmed_ledgers(ledger: ManagedLedger) -> list[tuple[int, int]]:
    """(ledger id, entries) of the stored ledgers, oldest first, counting only
    entries up to the last confirmed one (an append in flight is not there)."""
    last = ledger.last_confirmed_position
    counts: list[tuple[int, int]] = []
    for summary in ledger.ledger_summaries():
        if summary.ledger_id > last.ledger_id:
            break
        entries = summary.entries
        if summary.ledger_id == last.ledger_id:
            entries = min(entries, last.entry_id + 1)
        counts.append((summary.ledger_id, max(entries, 0)))
    return counts


def _nth_stored(counts: list[tuple[int, int]], index: int) -> Position | None:
    """The index-th (0-based) stored entry: entry ids start at 0 in every
    ledger and grow by 1 (storage/api.py), so the counts locate it unread."""
    if index < 0:
        return None
    for ledger_id, entries in counts:
        if index < entries:
            return Position(ledger_id, index)
        index -= entries
    return None


async def first_published_since(ledger: ManagedLedger, timestamp_ms: int) -> Position | None:
    """The first entry published at or after `timestamp_ms`, None when every
    entry is older (or there is none). The storage's binary search runs on a
    cursor: a throwaway non-durable one holds nothing back."""
    last = ledger.last_confirmed_position
    if last.entry_id < 0:
        return None

    def published_before(entry: Entry) -> bool:
        try:
            return publish_time(entry) < timestamp_ms
        except ProtocolError:
            return False  # Pulsar's predicate treats an unreadable entry so

    cursor = ledger.new_non_durable_cursor(EARLIEST, name=f"admin-find-{uuid.uuid4().hex}")
    try:
        before = await cursor.find_newest_matching(published_before, from_first_entry=True)
    finally:
        await cursor.close()
    found = ledger.first_position if before is None else ledger.next_position(before)
    return found if found <= last else None


def routes(service: BrokerService) -> list[web.RouteDef]:
    async def refuse_partitioned(request: web.Request, refusal: str) -> None:
        """Pulsar's 405 for the calls it refuses on a partitioned topic."""
        if await partition_names(service, topic_from_path(request)):
            raise HttpError(405, refusal)

    async def entry_at(ledger: ManagedLedger, position: Position | None, missing: str) -> Entry:
        entries = await ledger.read_positions([position]) if position is not None else []
        if not entries:
            raise HttpError(404, missing)
        return entries[0]

    async def last_message_id(request: web.Request) -> web.Response:
        topic = await stored_topic(service, request)
        position, batch_index = await topic.last_message_id()
        return web.json_response(message_id(position, topic.partition_index, batch_index))

    async def get_by_id(request: web.Request) -> web.Response:
        """Pulsar's getMessageById; the route's patterns make both ids integers."""
        info = request.match_info
        position = Position(int(info["ledger_id"]), int(info["entry_id"]))
        topic = await stored_topic(service, request)
        return entry_response(await entry_at(topic.ledger, position, "Message id not found"))

    async def examine(request: web.Request) -> web.Response:
        """Pulsar's examineMessage: messagePosition below 1 counts as 1, and
        any initialPosition but "earliest" (default "latest") counts from the
        newest entry."""
        query = request.query
        n = max(_integer(query.get("messagePosition", "1"), "messagePosition"), 1)
        from_earliest = query.get("initialPosition", "latest") == "earliest"
        await refuse_partitioned(
            request,
            "Examine messages on a partitioned topic is not allowed, "
            "please try examine message on specific topic partition",
        )
        topic = await stored_topic(service, request)
        counts = _confirmed_ledgers(topic.ledger)
        total = sum(entries for _, entries in counts)
        if total == 0:
            raise HttpError(412, "Could not examine messages due to the total message is zero")
        position = _nth_stored(counts, n - 1 if from_earliest else total - n)
        end = "earliest" if from_earliest else "latest"
        missing = f"the topic has {total} entries, no message at {n} from the {end}"
        return entry_response(await entry_at(topic.ledger, position, missing))

    async def message_id_at(request: web.Request) -> web.Response:
        timestamp = int(request.match_info["timestamp"])
        await refuse_partitioned(
            request,
            "Get message ID by timestamp on a partitioned topic is not allowed, "
            "please try do it on specific topic partition",
        )
        topic = await stored_topic(service, request)
        position = await first_published_since(topic.ledger, timestamp)
        if position is None:
            raise HttpError(404, "Message ID not found")
        return web.json_response(message_id(position, topic.partition_index))

    async def peek(request: web.Request) -> web.Response:
        """The n-th (1-based) entry the subscription has not acknowledged."""
        raw = request.match_info["position"]
        if not raw.isdigit():
            raise HttpError(400, f"the message position must be a non-negative integer: {raw!r}")
        n = int(raw)
        if n < 1:
            raise HttpError(412, "the message position starts at 1")
        await refuse_partitioned(request, "Peek messages on a partitioned topic is not allowed")
        sub = await stored_subscription(service, request)
        cursor, ledger = sub.cursor, sub.ledger
        position, last = cursor.mark_delete_position, ledger.last_confirmed_position
        seen = 0
        while seen < n:
            if position >= last:
                raise HttpError(404, f"subscription {sub.name!r} has fewer than {n} messages")
            position = ledger.next_position(position)
            if not cursor.is_deleted(position):
                seen += 1
        return entry_response(
            await entry_at(ledger, position, f"message {position} is no longer stored")
        )

    path = "/admin/v2/{domain}/{tenant}/{namespace}/{topic}"
    # Integers only (Pulsar's long path parameters): anything else is no route, 404.
    number = r"-?\d+"
    return [
        web.get(f"{path}/lastMessageId", last_message_id),
        web.get(f"{path}/ledger/{{ledger_id:{number}}}/entry/{{entry_id:{number}}}", get_by_id),
        web.get(f"{path}/examinemessage", examine),
        web.get(f"{path}/messageid/{{timestamp:{number}}}", message_id_at),
        web.get(f"{path}/subscription/{{subscription}}/position/{{position}}", peek),
    ]
