"""Offsets: per topic-partition, the position of the last message a batch
includes, as JSON Spark can checkpoint ({"<partition topic>": [ledger,
entry, batch index]}). A micro-batch reads, per partition, the messages
after its start offset up to and including its end offset. [-1, -1, -1]
means "before the first message"."""

from __future__ import annotations

import json
from collections.abc import Mapping

from magnetar.proto.ids import MessageId

Position = list[int]
Offsets = dict[str, Position]

BEFORE_FIRST: Position = [-1, -1, -1]


def position_of(msg_id: MessageId) -> Position:
    return [msg_id.ledger_id, msg_id.entry_id, msg_id.batch_index]


def after(position: Position, than: Position) -> bool:
    """Whether `position` comes after `than` (an entry without batch index
    stands for all of it)."""
    if position[:2] != than[:2]:
        return position[:2] > than[:2]
    if than[2] < 0:
        return False  # `than` is the whole entry
    return position[2] > than[2]


def start_id(position: Position) -> MessageId:
    """Where a reader starts to read what comes after `position`."""
    if position == BEFORE_FIRST:
        return MessageId.earliest
    return MessageId(position[0], position[1], -1, position[2])


def parse_json(option: str, raw: str, partitions: list[str]) -> Offsets:
    """A user's JSON offsets; partitions it does not name start before the first."""
    try:
        given = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"option {option}: not JSON: {exc}") from None
    if not isinstance(given, dict):
        raise ValueError(
            f'option {option}: a JSON object {{"<partition>": [ledger, entry, batch]}}'
        )
    offsets: Offsets = {}
    for name in partitions:
        value = given.get(name, BEFORE_FIRST)
        if not (
            isinstance(value, list) and len(value) == 3 and all(isinstance(v, int) for v in value)
        ):
            raise ValueError(f"option {option}: {name} needs [ledger, entry, batch index]")
        offsets[name] = list(value)
    unknown = sorted(set(given) - set(partitions))
    if unknown:
        raise ValueError(f"option {option}: not a partition of the topics read: {unknown}")
    return offsets


def merged(base: Mapping[str, Position], new_partitions: list[str]) -> Offsets:
    """`base` plus partitions created since, which start before their first message."""
    return {name: list(base.get(name, BEFORE_FIRST)) for name in new_partitions}
