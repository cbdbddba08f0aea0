"""Key-window deduplication: a Magnetar extension beyond Pulsar's.

Sequence-id deduplication cannot help a source that retries with a new
sequence id (an HTTP request retried by its caller), and it only compares
with the newest id, so an old message sent again later is stored twice.
With the `dedupKeyWindow` policy a message carrying the property
`idempotency-key` (name configurable) whose key was stored on the topic
within the window is not stored again: its receipt names the message id of
the first copy. Any client can use it; it is only a property.

Limits, by design: non-batched, non-chunked messages only (a batch cannot be
half stored); the window is counted from when the first copy was stored;
the index holds at most `max_keys` keys, oldest expiring first. The index
survives restarts: a snapshot in the properties of a dedicated cursor (two
entries per key: packed position and store time) plus a replay of the
entries after it.
"""

from __future__ import annotations

import asyncio
import re
import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from magnetar.broker.storage.api import ManagedCursor, ManagedLedger, Position, StorageError
from magnetar.proto.errors import ProtocolError
from magnetar.proto.frames import Payload
from magnetar.proto.messages import is_batch, is_chunk

log = structlog.get_logger(__name__)

CURSOR_NAME = "magnetar.keywindow"
POLICY_KEY = "dedupKeyWindow"
DEFAULT_PROPERTY = "idempotency-key"
_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d)?\s*$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_ENTRY_BITS = 32


class InvalidPolicy(ValueError):
    pass


def parse_duration_ms(value: object) -> int:
    """'10m', '30s', '1h', '250ms' or a number of seconds, in ms."""
    if isinstance(value, bool):
        raise InvalidPolicy(f"not a duration: {value!r}")
    if isinstance(value, int | float):
        return int(value * 1000)
    match = _DURATION.match(str(value))
    if match is None:
        raise InvalidPolicy(f"not a duration: {value!r} (use e.g. 10m, 30s, 1h)")
    return int(match.group(1)) * _UNIT_MS[match.group(2) or "s"]


@dataclass(frozen=True, slots=True)
class KeyWindowPolicy:
    window_ms: int
    max_keys: int = 100_000
    property: str = DEFAULT_PROPERTY

    @classmethod
    def from_json(cls, body: object) -> KeyWindowPolicy:
        if not isinstance(body, dict):
            raise InvalidPolicy('the policy is a JSON object: {"window": "10m", "maxKeys": N}')
        window = parse_duration_ms(body.get("window", "10m"))
        max_keys = body.get("maxKeys", 100_000)
        prop = body.get("property", DEFAULT_PROPERTY)
        if window <= 0:
            raise InvalidPolicy("window must be positive")
        if not isinstance(max_keys, int) or isinstance(max_keys, bool) or max_keys < 1:
            raise InvalidPolicy(f"maxKeys must be a positive integer, got {max_keys!r}")
        if not isinstance(prop, str) or not prop:
            raise InvalidPolicy("property must be a non-empty string")
        return cls(window, max_keys, prop)

    def to_json(self) -> dict[str, Any]:
        return {
            "window": f"{self.window_ms}ms",
            "maxKeys": self.max_keys,
            "property": self.property,
        }


def _pack(position: Position) -> int:
    return (position.ledger_id << _ENTRY_BITS) | position.entry_id


def _unpack(value: int) -> Position:
    return Position(value >> _ENTRY_BITS, value & ((1 << _ENTRY_BITS) - 1))


def idempotency_key(payload: Payload, prop: str) -> str | None:
    """The message's key under `prop`, for a non-batched, non-chunked message."""
    metadata = payload.metadata
    if is_batch(metadata) or is_chunk(metadata):
        return None
    for kv in metadata.properties:
        if kv.key == prop:
            return str(kv.value)
    return None


class KeyWindowIndex:
    def __init__(
        self,
        topic_name: str,
        ledger: ManagedLedger,
        policy: KeyWindowPolicy,
        *,
        snapshot_interval: int = 1000,
        clock: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self.topic_name = topic_name
        self.ledger = ledger
        self.policy = policy
        self.snapshot_interval = snapshot_interval
        self._clock = clock
        # key -> (position, stored at ms), oldest first.
        self._keys: OrderedDict[str, tuple[Position, int]] = OrderedDict()
        # Keys whose first copy is being stored: later copies wait for it.
        self._pending: dict[str, asyncio.Future[Position]] = {}
        self._cursor: ManagedCursor | None = None
        self._since_snapshot = 0
        self._last_position: Position | None = None

    def __len__(self) -> int:
        return len(self._keys)

    async def open(self) -> None:
        cursor = await self.ledger.open_cursor(CURSOR_NAME)
        self._restore(cursor.properties)
        cursor.rewind()
        replayed = 0
        while cursor.has_more_entries():
            entries = await cursor.read_entries(1000)
            if not entries:
                break
            for entry in entries:
                replayed += 1
                self._last_position = entry.position
                try:
                    payload = Payload.parse(entry.data, verify_checksum=False)
                    key = idempotency_key(payload, self.policy.property)
                    stored_at = int(payload.metadata.publish_time)
                except ProtocolError:
                    continue
                if key is not None and key not in self._keys:
                    self._remember(key, entry.position, stored_at)
        self._cursor = cursor
        self._expire()
        log.info("key-window index open", topic=self.topic_name, keys=len(self), replayed=replayed)

    def _restore(self, properties: Mapping[str, int]) -> None:
        rows = []
        for name, value in properties.items():
            if name.startswith("p:") and f"t:{name[2:]}" in properties:
                rows.append((int(properties[f"t:{name[2:]}"]), name[2:], _unpack(int(value))))
        for stored_at, key, position in sorted(rows):
            self._keys[key] = (position, stored_at)

    async def close(self, *, delete: bool = False) -> None:
        for future in self._pending.values():
            future.cancel()
        self._pending.clear()
        if self._cursor is None:
            return
        if delete:
            self._cursor = None
            try:
                await self.ledger.delete_cursor(CURSOR_NAME)
            except StorageError as exc:
                log.warning("deleting the key-window cursor failed", error=str(exc))
            return
        self._snapshot()

    # ------------------------------------------------------------ publish

    def lookup(self, key: str) -> Position | asyncio.Future[Position] | None:
        """Where the first copy of `key` is (or will be), or None."""
        self._expire()
        found = self._keys.get(key)
        if found is not None:
            return found[0]
        return self._pending.get(key)

    def storing(self, key: str, future: asyncio.Future[Position]) -> None:
        """The first copy of `key` is being appended."""
        self._pending[key] = future
        future.add_done_callback(lambda f: self._stored(key, f))

    def _stored(self, key: str, future: asyncio.Future[Position]) -> None:
        if self._pending.get(key) is future:
            del self._pending[key]
        if future.cancelled() or future.exception() is not None:
            return
        position = future.result()
        self._remember(key, position, self._clock())
        self._last_position = position
        self._since_snapshot += 1
        if self._since_snapshot >= self.snapshot_interval:
            self._snapshot()

    def _remember(self, key: str, position: Position, stored_at: int) -> None:
        self._keys[key] = (position, stored_at)
        self._keys.move_to_end(key)
        while len(self._keys) > self.policy.max_keys:
            self._keys.popitem(last=False)

    def _expire(self) -> None:
        horizon = self._clock() - self.policy.window_ms
        keys = self._keys
        while keys:
            _key, (_position, stored_at) = next(iter(keys.items()))
            if stored_at >= horizon:
                break
            keys.popitem(last=False)

    def _snapshot(self) -> None:
        cursor, position = self._cursor, self._last_position
        self._since_snapshot = 0
        if cursor is None or position is None or position <= cursor.mark_delete_position:
            return
        self._expire()
        properties: dict[str, int] = {}
        for key, (stored, stored_at) in self._keys.items():
            properties[f"p:{key}"] = _pack(stored)
            properties[f"t:{key}"] = stored_at
        try:
            cursor.mark_delete(position, properties=properties)
        except StorageError as exc:
            log.warning("key-window snapshot failed", topic=self.topic_name, error=str(exc))

    def memory_bytes(self) -> int:
        """An estimate of what the index holds (keys, tuples, positions)."""
        total = sys.getsizeof(self._keys)
        for key, value in self._keys.items():
            total += sys.getsizeof(key) + sys.getsizeof(value) + sys.getsizeof(value[0])
        return total
