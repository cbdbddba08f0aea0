"""CompactedView: the compacted entries of a topic up to its horizon, and
the file that keeps them across restarts.

The file is written aside (`.tmp`), fsynced and renamed over the old one, so
a crash leaves either the previous view or the new one, never a mix; a file
that fails its checksum is ignored as if compaction had never run.
Entries keep their original positions, so acks, seeks and message ids work
the same as on the raw topic.
"""

from __future__ import annotations

import bisect
import os
import struct
import zlib
from collections.abc import Sequence
from pathlib import Path

import structlog

from magnetar.broker.storage.api import Entry, Position

log = structlog.get_logger(__name__)

MAGIC = b"MGCV"
FORMAT_VERSION = 1
_HEADER = struct.Struct(">4sIqqI")  # magic, format, horizon ledger, horizon entry, count
_ENTRY = struct.Struct(">qqII")  # ledger, entry, messages, data length
_CRC = struct.Struct(">I")


class CorruptView(Exception):
    pass


class CompactedView:
    def __init__(self, horizon: Position, entries: Sequence[Entry]) -> None:
        self.horizon = horizon
        self.entries = list(entries)
        self._positions = [e.position for e in self.entries]

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def messages(self) -> int:
        return sum(e.num_messages for e in self.entries)

    def read(self, start: Position, limit: int) -> list[Entry]:
        """Up to `limit` entries at or after `start` (all at or before the horizon)."""
        index = bisect.bisect_left(self._positions, start)
        return self.entries[index : index + limit]

    @property
    def last_position(self) -> Position | None:
        return self._positions[-1] if self._positions else None

    # -------------------------------------------------------------- file

    def encode(self) -> bytes:
        parts = [
            _HEADER.pack(MAGIC, FORMAT_VERSION, *self.horizon, len(self.entries)),
        ]
        for entry in self.entries:
            parts.append(_ENTRY.pack(*entry.position, entry.num_messages, len(entry.data)))
            parts.append(entry.data)
        body = b"".join(parts)
        return body + _CRC.pack(zlib.crc32(body))

    @classmethod
    def decode(cls, data: bytes) -> CompactedView:
        if len(data) < _HEADER.size + _CRC.size:
            raise CorruptView("too short")
        body, (crc,) = data[: -_CRC.size], _CRC.unpack(data[-_CRC.size :])
        if zlib.crc32(body) != crc:
            raise CorruptView("checksum mismatch")
        magic, version, h_ledger, h_entry, count = _HEADER.unpack_from(body, 0)
        if magic != MAGIC or version != FORMAT_VERSION:
            raise CorruptView(f"not a compacted view (magic {magic!r}, format {version})")
        offset = _HEADER.size
        entries: list[Entry] = []
        for _ in range(count):
            ledger_id, entry_id, messages, size = _ENTRY.unpack_from(body, offset)
            offset += _ENTRY.size
            entries.append(
                Entry(Position(ledger_id, entry_id), bytes(body[offset : offset + size]), messages)
            )
            offset += size
        if offset != len(body):
            raise CorruptView("trailing bytes")
        return cls(Position(h_ledger, h_entry), entries)


def save(view: CompactedView, path: Path) -> None:
    """Write the view aside and swap it in atomically (blocking: run in a thread)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as out:
        out.write(view.encode())
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)
    # The rename itself must survive a crash.
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def load(path: Path) -> CompactedView | None:
    """The stored view, or None when there is none (or it is unreadable)."""
    tmp = path.with_name(path.name + ".tmp")
    if tmp.exists():
        tmp.unlink()  # an interrupted compaction; the previous view still stands
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        return CompactedView.decode(data)
    except (CorruptView, struct.error) as exc:
        log.warning("compacted view ignored", path=path.name, reason=str(exc))
        return None


def remove(path: Path) -> None:
    for candidate in (path, path.with_name(path.name + ".tmp")):
        candidate.unlink(missing_ok=True)
