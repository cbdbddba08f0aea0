"""EtcdMetadataStore: the MetadataStore tree on etcd, shared by a cluster.

A node is one etcd key, ``<prefix><path>``. Versions follow the SQLite store
(0 when created, +1 per put): etcd counts from 1, so ours is etcd's minus one,
and compare-and-set is an etcd transaction comparing that version (etcd's 0
means "absent"). Parents are created as empty nodes, as ZooKeeper-shaped
stores do, each with a create-if-absent transaction. Listeners hear the
changes made through this store, like the embedded store's.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

import aetcd
import aetcd.exceptions
import aetcd.utils
import structlog

from magnetar.broker.storage.api import (
    BadVersion,
    GetResult,
    MetadataStore,
    MetadataStoreClosed,
    NotEmpty,
    NotFound,
    Notification,
    NotificationListener,
    NotificationType,
    Stat,
    StorageError,
    validate_path,
)
from magnetar.broker.storage.metadata_api import (
    Check,
    CommitOp,
    Delete,
    Put,
    validate_commit,
)

log = structlog.get_logger(__name__)

DEFAULT_PREFIX = "/magnetar/meta"


def parse_etcd_url(url: str) -> tuple[str, int]:
    """``etcd://host:port`` (the first endpoint of a comma list) -> (host, port)."""
    first = url.split(",", 1)[0].strip()
    parts = urlsplit(first)
    if parts.scheme not in ("etcd", "http") or not parts.hostname:
        raise ValueError(f"{url!r} is not an etcd://host:port URL")
    return parts.hostname, parts.port or 2379


def _parent(path: str) -> str:
    i = path.rfind("/")
    return "/" if i == 0 else path[:i]


def _encode(value: bytes, ctime: int, mtime: int) -> bytes:
    # The times ride in a small header: etcd keeps revisions, not clock times.
    head = json.dumps([ctime, mtime], separators=(",", ":")).encode()
    return head + b"\n" + value


def _decode(raw: bytes) -> tuple[bytes, int, int]:
    head, _, value = raw.partition(b"\n")
    ctime, mtime = json.loads(head)
    return value, int(ctime), int(mtime)


class EtcdMetadataStore(MetadataStore):
    """Construct with :meth:`connect`; :attr:`client` is shared with the
    cluster's session (leases, ownership keys)."""

    def __init__(self, client: aetcd.Client, prefix: str, owns_client: bool) -> None:
        self.client = client
        self._prefix = prefix.rstrip("/")
        self._owns_client = owns_client
        self._listeners: list[NotificationListener] = []
        self._closed = False

    @classmethod
    async def connect(cls, url: str, prefix: str = DEFAULT_PREFIX) -> EtcdMetadataStore:
        host, port = parse_etcd_url(url)
        client = aetcd.Client(host=host, port=port, timeout=10)
        try:
            await client.connect()
            await client.status()  # fails now if nobody listens there
        except aetcd.exceptions.ClientError as exc:
            await client.close()
            raise StorageError(f"cannot reach etcd at {url}: {exc}") from exc
        return cls(client, prefix, owns_client=True)

    def key(self, path: str) -> bytes:
        return (self._prefix + path).encode()

    # ------------------------------------------------------------------ interface

    async def get(self, path: str) -> GetResult | None:
        validate_path(path)
        self._check_open()
        got = await self._call(self.client.get(self.key(path)))
        if got is None:
            return None
        value, ctime, mtime = _decode(got.value)
        return GetResult(value, Stat(got.version - 1, ctime, mtime))

    async def put(self, path: str, value: bytes, expected_version: int | None = None) -> Stat:
        validate_path(path)
        if path == "/":
            raise ValueError("cannot put the root node")
        self._check_open()
        notes: list[Notification] = []
        await self._create_parents(_parent(path), notes)
        key = self.key(path)
        now = int(time.time() * 1000)
        txn = self.client.transactions
        while True:
            current = await self._call(self.client.get(key))
            version = 0 if current is None else current.version
            if expected_version is not None and expected_version != version - 1:
                state = "absent" if current is None else f"is {version - 1}"
                raise BadVersion(f"{path}: expected version {expected_version}, {state}")
            ctime = now if current is None else _decode(current.value)[1]
            ok, _ = await self._call(
                self.client.transaction(
                    compare=[txn.version(key) == version],
                    success=[txn.put(key, _encode(bytes(value), ctime, now))],
                    failure=[],
                )
            )
            if ok:
                break
            if expected_version is not None:
                raise BadVersion(f"{path}: changed concurrently")
            # Unconditional put raced another writer: read again and retry.
        if current is None:
            notes.append(Notification(NotificationType.CREATED, path))
            notes.append(Notification(NotificationType.CHILDREN_CHANGED, _parent(path)))
        else:
            notes.append(Notification(NotificationType.MODIFIED, path))
        self._notify(notes)
        return Stat(version, ctime, now)

    async def delete(self, path: str, expected_version: int | None = None) -> None:
        validate_path(path)
        self._check_open()
        key = self.key(path)
        current = await self._call(self.client.get(key))
        if current is None:
            raise NotFound(path)
        if expected_version is not None and expected_version != current.version - 1:
            raise BadVersion(f"{path}: expected version {expected_version}, is {current.version}")
        children = await self._call(self.client.get_prefix(key + b"/", keys_only=True))
        if list(children):
            raise NotEmpty(path)
        txn = self.client.transactions
        ok, _ = await self._call(
            self.client.transaction(
                compare=[txn.version(key) == current.version],
                success=[txn.delete(key)],
                failure=[],
            )
        )
        if not ok:
            raise BadVersion(f"{path}: changed concurrently")
        self._notify(
            [
                Notification(NotificationType.DELETED, path),
                Notification(NotificationType.CHILDREN_CHANGED, _parent(path)),
            ]
        )

    async def commit(self, ops: Sequence[CommitOp]) -> list[Stat | None]:
        validate_commit(ops)
        self._check_open()
        ops = list(ops)
        notes: list[Notification] = []
        for op in ops:
            if isinstance(op, Put):  # empty parents may exist alone, as put makes them
                await self._create_parents(_parent(op.path), notes)
        txn = self.client.transactions
        while True:
            keys = [self.key(op.path) for op in ops]
            currents = await asyncio.gather(*(self._call(self.client.get(k)) for k in keys))
            now = int(time.time() * 1000)
            compare: list[Any] = []
            success: list[Any] = []
            stats: list[Stat | None] = []
            changes: list[Notification] = []
            for op, key, current in zip(ops, keys, currents, strict=True):
                version = 0 if current is None else current.version
                expected = op.version if isinstance(op, Check) else op.expected_version
                if expected is not None and expected != version - 1:
                    state = "absent" if current is None else f"is {version - 1}"
                    raise BadVersion(f"{op.path}: expected version {expected}, {state}")
                compare.append(txn.version(key) == version)
                if isinstance(op, Put):
                    ctime = now if current is None else _decode(current.value)[1]
                    success.append(txn.put(key, _encode(bytes(op.value), ctime, now)))
                    stats.append(Stat(version, ctime, now))
                    if current is None:
                        changes.append(Notification(NotificationType.CREATED, op.path))
                        changes.append(
                            Notification(NotificationType.CHILDREN_CHANGED, _parent(op.path))
                        )
                    else:
                        changes.append(Notification(NotificationType.MODIFIED, op.path))
                elif isinstance(op, Delete):
                    if current is None:
                        raise NotFound(op.path)
                    below = await self._call(self.client.get_prefix(key + b"/", keys_only=True))
                    if list(below):
                        raise NotEmpty(op.path)
                    success.append(txn.delete(key))
                    stats.append(None)
                    changes.append(Notification(NotificationType.DELETED, op.path))
                    changes.append(
                        Notification(NotificationType.CHILDREN_CHANGED, _parent(op.path))
                    )
                else:
                    stats.append(None)
            ok, _ = await self._call(
                self.client.transaction(compare=compare, success=success, failure=[])
            )
            if ok:
                break
            # Something changed between the reads and the transaction: read
            # again; a condition that no longer holds raises above.
        self._notify(notes + changes)
        return stats

    async def delete_recursive(self, path: str) -> None:
        validate_path(path)
        self._check_open()
        key = self.key(path)
        below = await self._call(self.client.get_prefix(key + b"/", keys_only=True))
        paths = [kv.key.decode()[len(self._prefix) :] for kv in below]
        exists = await self._call(self.client.get(key)) is not None
        if not paths and not exists:
            return
        txn = self.client.transactions
        # One transaction: no reader sees the node half deleted.
        await self._call(
            self.client.transaction(
                compare=[],
                success=[
                    txn.delete(key + b"/", range_end=aetcd.utils.prefix_range_end(key + b"/")),
                    txn.delete(key),
                ],
                failure=[],
            )
        )
        notes = [Notification(NotificationType.DELETED, p) for p in sorted(paths, reverse=True)]
        if exists:
            notes.append(Notification(NotificationType.DELETED, path))
        notes.append(Notification(NotificationType.CHILDREN_CHANGED, _parent(path)))
        self._notify(notes)

    async def get_children(self, path: str) -> list[str]:
        validate_path(path)
        self._check_open()
        base = self.key(path).rstrip(b"/") + b"/"
        found = await self._call(self.client.get_prefix(base, keys_only=True))
        names = {kv.key[len(base) :].decode() for kv in found}
        return sorted(n for n in names if n and "/" not in n)

    async def exists(self, path: str) -> bool:
        validate_path(path)
        self._check_open()
        if path == "/":
            return True
        return await self._call(self.client.get(self.key(path))) is not None

    def register_listener(self, listener: NotificationListener) -> Callable[[], None]:
        self._listeners.append(listener)

        def unregister() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unregister

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._owns_client:
            await self.client.close()

    # ------------------------------------------------------------------ internals

    def _check_open(self) -> None:
        if self._closed:
            raise MetadataStoreClosed("metadata store is closed")

    async def _call(self, awaitable: Any) -> Any:
        try:
            return await awaitable
        except aetcd.exceptions.ClientError as exc:
            if self._closed:
                raise MetadataStoreClosed("metadata store is closed") from exc
            raise StorageError(f"etcd request failed: {exc}") from exc

    async def _create_parents(self, path: str, notes: list[Notification]) -> None:
        missing: list[str] = []
        p = path
        while p != "/":
            if await self._call(self.client.get(self.key(p))) is not None:
                break
            missing.append(p)
            p = _parent(p)
        txn = self.client.transactions
        now = int(time.time() * 1000)
        for p in reversed(missing):
            key = self.key(p)
            created, _ = await self._call(
                self.client.transaction(
                    compare=[txn.version(key) == 0],
                    success=[txn.put(key, _encode(b"", now, now))],
                    failure=[],
                )
            )
            if created:
                notes.append(Notification(NotificationType.CREATED, p))
                notes.append(Notification(NotificationType.CHILDREN_CHANGED, _parent(p)))

    def _notify(self, notes: list[Notification]) -> None:
        for note in notes:
            for listener in list(self._listeners):
                try:
                    listener(note)
                except Exception:
                    log.exception("metadata listener failed", path=note.path)
