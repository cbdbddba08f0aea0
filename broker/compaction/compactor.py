"""The compaction run: which message is the latest for each key up to the
horizon, and the compacted entries that keep only those.

Two passes, as in Pulsar: the first maps every key to the position (and
batch index) of its latest message, a tombstone (`null_value`, or an empty
payload) removing the key; the second reads just the surviving entries and
re-batches batches message by message. A run starts from the previous view
and reads only what was written after its horizon. Messages without a key
are not kept (Pulsar's topicCompactionRetainNullKey default). Compressed
batches are kept whole: the broker never decompresses.
"""

from __future__ import annotations

import asyncio

from magnetar.broker.compaction.view import CompactedView
from magnetar.broker.storage.api import Entry, ManagedLedger, Position
from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.errors import ProtocolError
from magnetar.proto.frames import Payload
from magnetar.proto.messages import build_batch, is_batch, split_batch

READ_BATCH = 1000
_NONE = pb.CompressionType.Value("NONE")

# A message's identity within the topic: entry position and batch index (-1: no batch).
MessageRef = tuple[Position, int]


def _is_tombstone(meta: pb.MessageMetadata | pb.SingleMessageMetadata, size: int) -> bool:
    return meta.null_value or size == 0


def entry_keys(entry: Entry) -> tuple[bool, list[tuple[str | None, bool]]] | None:
    """Whether the entry is a batch, and (key, is tombstone) per message;
    None for an entry that is kept whole (a compressed batch)."""
    try:
        payload = Payload.parse(entry.data, verify_checksum=False)
        meta = payload.metadata
    except ProtocolError:
        return False, []  # no client can read it either; drop it
    if not is_batch(meta):
        key = meta.partition_key if meta.HasField("partition_key") else None
        size = meta.uncompressed_size if meta.compression != _NONE else len(payload.payload)
        return False, [(key, _is_tombstone(meta, size))]
    if meta.compression != _NONE:
        return None
    try:
        messages = split_batch(payload.payload, meta.num_messages_in_batch)
    except ProtocolError:
        return True, []
    return True, [
        (
            single.partition_key if single.HasField("partition_key") else None,
            _is_tombstone(single, len(body)),
        )
        for single, body in messages
    ]


def _note(latest: dict[str, MessageRef], whole: set[Position], entry: Entry) -> None:
    found = entry_keys(entry)
    if found is None:
        whole.add(entry.position)
        return
    # A plain entry's message is index -1: kept as stored, never re-batched.
    batched, keys = found
    for index, (key, tombstone) in enumerate(keys):
        if key is None:
            continue
        if tombstone:
            latest.pop(key, None)
        else:
            latest[key] = (entry.position, index if batched else -1)


def _retain(entry: Entry, keep: set[int]) -> Entry | None:
    """The entry with only the messages at `keep` (batch indexes; -1: all)."""
    if -1 in keep:
        return entry
    payload = Payload.parse(entry.data, verify_checksum=False)
    meta = payload.metadata
    messages = split_batch(payload.payload, meta.num_messages_in_batch)
    if len(keep) == len(messages):
        return entry
    kept = [m for index, m in enumerate(messages) if index in keep]
    if not kept:
        return None
    body = build_batch(kept)
    new_meta = pb.MessageMetadata()
    new_meta.CopyFrom(meta)
    new_meta.num_messages_in_batch = len(kept)
    if new_meta.HasField("uncompressed_size"):
        new_meta.uncompressed_size = len(body)
    return Entry(entry.position, Payload.build(new_meta, body).data, len(kept))


async def compact(ledger: ManagedLedger, previous: CompactedView | None) -> CompactedView:
    """A new view up to the ledger's last entry, built on `previous`."""
    horizon = ledger.last_confirmed_position
    latest: dict[str, MessageRef] = {}
    whole: set[Position] = set()
    old = {e.position: e for e in previous.entries} if previous is not None else {}
    for entry in old.values():
        _note(latest, whole, entry)
    start = ledger.first_position
    if previous is not None:
        start = max(start, ledger.next_position(previous.horizon))
    # First pass: the latest message of every key.
    while start <= horizon:
        entries = await ledger.read_entries(start, READ_BATCH)
        entries = [e for e in entries if e.position <= horizon]
        if not entries:
            break
        for entry in entries:
            _note(latest, whole, entry)
        start = ledger.next_position(entries[-1].position)
        await asyncio.sleep(0)  # let the broker serve while a big topic compacts
    # Second pass: just the entries that hold a surviving message.
    wanted: dict[Position, set[int]] = {p: {-1} for p in whole}
    for position, index in latest.values():
        wanted.setdefault(position, set()).add(index)
    positions = sorted(wanted)
    kept: list[Entry] = []
    for offset in range(0, len(positions), READ_BATCH):
        chunk = positions[offset : offset + READ_BATCH]
        from_old = {p: old[p] for p in chunk if p in old}
        fresh = [p for p in chunk if p not in old]
        found = {e.position: e for e in await ledger.read_positions(fresh)} if fresh else {}
        found.update(from_old)
        for position in chunk:
            stored = found.get(position)
            if stored is None:
                continue  # trimmed meanwhile
            retained = _retain(stored, wanted[position])
            if retained is not None:
                kept.append(retained)
    return CompactedView(horizon, kept)
