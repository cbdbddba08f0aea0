"""What the broker reads back from stored entries' metadata.

Entries are stored as the SEND's bytes; these helpers parse the metadata
where a query needs it (last message id, seek by publish time).
"""

from __future__ import annotations

from magnetar.broker.storage.api import Entry, ManagedLedger, Position
from magnetar.proto.errors import ProtocolError
from magnetar.proto.frames import Payload
from magnetar.proto.messages import is_batch


async def last_entry_id(ledger: ManagedLedger) -> tuple[Position, int]:
    """The newest entry's position and its last batch index (-1: not a batch)."""
    position = ledger.last_confirmed_position
    if position.entry_id < 0:
        return position, -1
    entries = await ledger.read_positions([position])
    if not entries:
        return position, -1
    entry = entries[0]
    if entry.num_messages > 1:
        return position, entry.num_messages - 1
    try:
        batched = is_batch(Payload.parse(entry.data, verify_checksum=False).metadata)
    except ProtocolError:
        batched = False
    return position, 0 if batched else -1


def publish_time(entry: Entry) -> int:
    """The entry's publish time in ms (a batch's is its first message's)."""
    return int(Payload.parse(entry.data, verify_checksum=False).metadata.publish_time)
