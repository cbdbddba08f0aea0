"""Embedded metadata store on SQLite (stdlib), WAL mode, on its own thread.

One thread owns the writing connection. Calls queue up; the thread takes every
queued call into one transaction (group commit: one fsync for many puts), each
call in its own savepoint so a failed compare-and-set leaves the others
intact. Results and change notifications go back to the caller's event loop.

Point reads (get, exists) run on the caller's thread on a second, read-only
connection: a WAL reader never waits for the writer, and a read of one row
costs less than the hop to the writer thread (where it would also queue
behind commits). A read of a path with a write still queued (on it or below
it) goes through the queue instead, so a caller always sees the writes it
submitted before the read.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

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

T = TypeVar("T")
_Op = Callable[[sqlite3.Connection, list[Notification]], Any]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS nodes (
    path TEXT PRIMARY KEY,
    parent TEXT NOT NULL,
    value BLOB NOT NULL,
    version INTEGER NOT NULL,
    ctime INTEGER NOT NULL,
    mtime INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS nodes_parent ON nodes(parent);
"""


def _parent(path: str) -> str:
    i = path.rfind("/")
    return "/" if i == 0 else path[:i]


def _stat(row: tuple[Any, ...]) -> Stat:
    return Stat(int(row[0]), int(row[1]), int(row[2]))


def _with_ancestors(path: str) -> tuple[str, ...]:
    found = [path]
    while path != "/":
        path = _parent(path)
        found.append(path)
    return tuple(found)


class _Call:
    __slots__ = ("fn", "future", "loop", "recursive", "touched")

    def __init__(
        self,
        fn: _Op,
        future: asyncio.Future[Any],
        loop: asyncio.AbstractEventLoop,
        touched: tuple[str, ...] = (),
        recursive: bool = False,
    ):
        self.fn = fn
        self.future = future
        self.loop = loop
        self.touched = touched  # paths whose reads wait for this write
        self.recursive = recursive


def _resolve(fut: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if fut.done():
        return
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(result)


class SqliteMetadataStore(MetadataStore):
    """:class:`MetadataStore` in one SQLite file. Construct with :meth:`open`."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._queue: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._listeners: list[NotificationListener] = []
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="magnetar-metadata", daemon=True)
        self._ready = threading.Event()
        self._open_error: BaseException | None = None
        self._reader: sqlite3.Connection | None = None
        self._reader_lock = threading.Lock()
        # Paths with queued writes (each write counts on its path and its
        # ancestors, whose existence a put may change); a queued recursive
        # delete sends every read through the queue.
        self._pending: dict[str, int] = {}
        self._pending_recursive = 0
        self._pending_lock = threading.Lock()

    @classmethod
    async def open(cls, path: str) -> SqliteMetadataStore:
        store = cls(path)
        store._thread.start()
        await asyncio.to_thread(store._ready.wait)
        if store._open_error is not None:
            raise StorageError(f"cannot open metadata store {path}") from store._open_error
        try:
            reader = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            reader.execute("PRAGMA query_only=ON")
        except sqlite3.Error as exc:
            await store.close()
            raise StorageError(f"cannot open metadata store {path}") from exc
        store._reader = reader
        return store

    # ------------------------------------------------------------------- interface

    async def get(self, path: str) -> GetResult | None:
        validate_path(path)

        def op(conn: sqlite3.Connection, _n: list[Notification]) -> GetResult | None:
            row = conn.execute(
                "SELECT value, version, ctime, mtime FROM nodes WHERE path = ?", (path,)
            ).fetchone()
            return None if row is None else GetResult(bytes(row[0]), _stat(row[1:]))

        result: GetResult | None = await self._point_read(path, op)
        return result

    async def put(self, path: str, value: bytes, expected_version: int | None = None) -> Stat:
        validate_path(path)
        if path == "/":
            raise ValueError("cannot put the root node")
        data = bytes(value)

        def op(conn: sqlite3.Connection, notes: list[Notification]) -> Stat:
            return self._put_row(conn, path, data, expected_version, notes)

        result: Stat = await self._submit(op, path)
        return result

    async def delete(self, path: str, expected_version: int | None = None) -> None:
        validate_path(path)

        def op(conn: sqlite3.Connection, notes: list[Notification]) -> None:
            self._delete_row(conn, path, expected_version, notes)

        await self._submit(op, path)

    async def commit(self, ops: Sequence[CommitOp]) -> list[Stat | None]:
        validate_commit(ops)
        ops = list(ops)
        if all(isinstance(o, Put) and o.expected_version == -1 for o in ops):
            creations = cast(list[Put], ops)

            def create(conn: sqlite3.Connection, notes: list[Notification]) -> list[Stat | None]:
                return list(self._create_rows(conn, creations, notes))

            made: list[Stat | None] = await self._submit(create, *(o.path for o in ops))
            return made

        def op(conn: sqlite3.Connection, notes: list[Notification]) -> list[Stat | None]:
            # Conditions first, so that a failed one changes nothing; the
            # call's savepoint undoes the writes if a later step still fails.
            for o in ops:
                expected = o.version if isinstance(o, Check) else o.expected_version
                if expected is None:
                    continue
                row = conn.execute("SELECT version FROM nodes WHERE path = ?", (o.path,)).fetchone()
                if (-1 if row is None else int(row[0])) != expected:
                    state = "absent" if row is None else f"is {row[0]}"
                    raise BadVersion(f"{o.path}: expected version {expected}, {state}")
            stats: list[Stat | None] = []
            for o in ops:
                if isinstance(o, Put):
                    stats.append(self._put_row(conn, o.path, bytes(o.value), None, notes))
                elif isinstance(o, Delete):
                    self._delete_row(conn, o.path, None, notes)
                    stats.append(None)
                else:
                    stats.append(None)
            return stats

        touched = [o.path for o in ops if not isinstance(o, Check)]
        result: list[Stat | None] = await self._submit(op, *touched)
        return result

    async def delete_recursive(self, path: str) -> None:
        validate_path(path)

        def op(conn: sqlite3.Connection, notes: list[Notification]) -> None:
            # '0' sorts right after '/': the range holds exactly the descendants.
            lo, hi = (path.rstrip("/") + "/", path.rstrip("/") + "0")
            rows = conn.execute(
                "SELECT path FROM nodes WHERE (path >= ? AND path < ?) OR path = ?",
                (lo, hi, path),
            ).fetchall()
            if not rows:
                return
            conn.execute(
                "DELETE FROM nodes WHERE (path >= ? AND path < ?) OR path = ?", (lo, hi, path)
            )
            for (p,) in sorted(rows, reverse=True):
                notes.append(Notification(NotificationType.DELETED, str(p)))
            notes.append(Notification(NotificationType.CHILDREN_CHANGED, _parent(path)))

        await self._submit(op, path, recursive=True)

    async def get_children(self, path: str) -> list[str]:
        validate_path(path)
        prefix = 1 if path == "/" else len(path) + 1

        def op(conn: sqlite3.Connection, _n: list[Notification]) -> list[str]:
            rows = conn.execute(
                "SELECT path FROM nodes WHERE parent = ? ORDER BY path", (path,)
            ).fetchall()
            return [str(r[0])[prefix:] for r in rows]

        result: list[str] = await self._submit(op)
        return result

    async def exists(self, path: str) -> bool:
        validate_path(path)
        if path == "/":
            return True

        def op(conn: sqlite3.Connection, _n: list[Notification]) -> bool:
            return (
                conn.execute("SELECT 1 FROM nodes WHERE path = ?", (path,)).fetchone() is not None
            )

        result: bool = await self._point_read(path, op)
        return result

    @property
    def sees_every_change(self) -> bool:
        # The file is this process's alone (the data directory is locked).
        return True

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
        self._queue.put(None)
        await asyncio.to_thread(self._thread.join)
        with self._reader_lock:
            if self._reader is not None:
                self._reader.close()
                self._reader = None

    # -------------------------------------------------------------------- internals

    def _put_row(
        self,
        conn: sqlite3.Connection,
        path: str,
        data: bytes,
        expected_version: int | None,
        notes: list[Notification],
    ) -> Stat:
        now = int(time.time() * 1000)
        row = conn.execute("SELECT version, ctime FROM nodes WHERE path = ?", (path,)).fetchone()
        if row is None:
            if expected_version is not None and expected_version != -1:
                raise BadVersion(f"{path}: expected version {expected_version}, absent")
            self._create_parents(conn, _parent(path), now, notes)
            conn.execute(
                "INSERT INTO nodes VALUES (?, ?, ?, 0, ?, ?)",
                (path, _parent(path), data, now, now),
            )
            notes.append(Notification(NotificationType.CREATED, path))
            notes.append(Notification(NotificationType.CHILDREN_CHANGED, _parent(path)))
            return Stat(0, now, now)
        version, ctime = int(row[0]), int(row[1])
        if expected_version is not None and expected_version != version:
            raise BadVersion(f"{path}: expected version {expected_version}, is {version}")
        conn.execute(
            "UPDATE nodes SET value = ?, version = ?, mtime = ? WHERE path = ?",
            (data, version + 1, now, path),
        )
        notes.append(Notification(NotificationType.MODIFIED, path))
        return Stat(version + 1, ctime, now)

    def _create_rows(
        self, conn: sqlite3.Connection, ops: list[Put], notes: list[Notification]
    ) -> list[Stat]:
        """Nodes that must not exist yet (new ledgers' first records, stored
        in batches): three statements for the lot, not four each. Each
        statement hands the GIL over and back, and this thread taking it
        back slowed the event loop's topic creation (issue 43)."""
        paths = [o.path for o in ops]
        marks = ",".join("?" * len(paths))
        there = conn.execute(f"SELECT path FROM nodes WHERE path IN ({marks})", paths).fetchone()
        if there is not None:
            raise BadVersion(f"{there[0]}: expected version -1, is there")
        now = int(time.time() * 1000)
        for parent in dict.fromkeys(map(_parent, paths)):
            self._create_parents(conn, parent, now, notes)
        rows = [(o.path, _parent(o.path), bytes(o.value), now, now) for o in ops]
        conn.executemany("INSERT INTO nodes VALUES (?, ?, ?, 0, ?, ?)", rows)
        for path, parent, *_ in rows:
            notes.append(Notification(NotificationType.CREATED, path))
            notes.append(Notification(NotificationType.CHILDREN_CHANGED, parent))
        return [Stat(0, now, now)] * len(rows)

    @staticmethod
    def _delete_row(
        conn: sqlite3.Connection,
        path: str,
        expected_version: int | None,
        notes: list[Notification],
    ) -> None:
        row = conn.execute("SELECT version FROM nodes WHERE path = ?", (path,)).fetchone()
        if row is None:
            raise NotFound(path)
        if expected_version is not None and expected_version != int(row[0]):
            raise BadVersion(f"{path}: expected version {expected_version}, is {row[0]}")
        if conn.execute("SELECT 1 FROM nodes WHERE parent = ? LIMIT 1", (path,)).fetchone():
            raise NotEmpty(path)
        conn.execute("DELETE FROM nodes WHERE path = ?", (path,))
        notes.append(Notification(NotificationType.DELETED, path))
        notes.append(Notification(NotificationType.CHILDREN_CHANGED, _parent(path)))

    @staticmethod
    def _create_parents(
        conn: sqlite3.Connection, path: str, now: int, notes: list[Notification]
    ) -> None:
        missing: list[str] = []
        p = path
        while p != "/":
            if conn.execute("SELECT 1 FROM nodes WHERE path = ?", (p,)).fetchone():
                break
            missing.append(p)
            p = _parent(p)
        for p in reversed(missing):
            conn.execute("INSERT INTO nodes VALUES (?, ?, x'', 0, ?, ?)", (p, _parent(p), now, now))
            notes.append(Notification(NotificationType.CREATED, p))
            notes.append(Notification(NotificationType.CHILDREN_CHANGED, _parent(p)))

    async def _point_read(self, path: str, fn: _Op) -> Any:
        """``fn`` on the caller's thread over the reader connection, or through
        the writer's queue when a write of ``path`` is queued or the reader
        cannot answer (closed, busy)."""
        with self._pending_lock:
            here = not self._pending_recursive and path not in self._pending
        if here:
            with self._reader_lock:
                if self._reader is not None and not self._closed:
                    with contextlib.suppress(sqlite3.Error):
                        return fn(self._reader, [])
        return await self._submit(fn)

    async def _submit(self, fn: _Op, *writes: str, recursive: bool = False) -> Any:
        if self._closed:
            raise MetadataStoreClosed("metadata store is closed")
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        touched = tuple({p for w in writes for p in _with_ancestors(w)})
        if touched:
            with self._pending_lock:
                for p in touched:
                    self._pending[p] = self._pending.get(p, 0) + 1
                self._pending_recursive += recursive
        self._queue.put(_Call(fn, fut, loop, touched, recursive))
        return await fut

    def _written(self, batch: list[_Call]) -> None:
        """The batch is committed (or rolled back): its paths read here again."""
        with self._pending_lock:
            for call in batch:
                for p in call.touched:
                    left = self._pending[p] - 1
                    if left:
                        self._pending[p] = left
                    else:
                        del self._pending[p]
                self._pending_recursive -= call.recursive

    def _notify(self, notes: list[Notification]) -> None:
        for note in notes:
            for listener in list(self._listeners):
                try:
                    listener(note)
                except Exception:
                    log.exception("metadata listener failed", path=note.path)

    def _run(self) -> None:
        try:
            conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=True)
            conn.execute("PRAGMA journal_mode=WAL")
            # FULL: a committed transaction survives power loss, not just a crash;
            # ledger records must never be older than the files they describe.
            conn.execute("PRAGMA synchronous=FULL")
            conn.executescript(_SCHEMA)
        except BaseException as exc:
            self._open_error = exc
            self._ready.set()
            return
        self._ready.set()
        try:
            self._serve(conn)
        finally:
            conn.close()

    def _serve(self, conn: sqlite3.Connection) -> None:
        closing = False
        while not closing:
            first = self._queue.get()
            batch: list[_Call] = []
            if first is None:
                closing = True
            else:
                batch.append(first)
            while True:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    closing = True
                else:
                    batch.append(nxt)
            if batch:
                self._run_batch(conn, batch)
        # Anything queued after the close marker fails.
        while True:
            try:
                late = self._queue.get_nowait()
            except queue.Empty:
                break
            if late is not None:
                self._written([late])
                late.loop.call_soon_threadsafe(
                    _resolve, late.future, None, MetadataStoreClosed("metadata store is closed")
                )

    def _run_batch(self, conn: sqlite3.Connection, batch: list[_Call]) -> None:
        results: list[tuple[_Call, Any, BaseException | None]] = []
        notes: list[Notification] = []
        try:
            conn.execute("BEGIN IMMEDIATE")
            for call in batch:
                call_notes: list[Notification] = []
                conn.execute("SAVEPOINT op")
                try:
                    value = call.fn(conn, call_notes)
                except Exception as exc:
                    conn.execute("ROLLBACK TO op")
                    conn.execute("RELEASE op")
                    if isinstance(exc, sqlite3.Error):
                        exc = StorageError(f"metadata store error: {exc}")
                    results.append((call, None, exc))
                    continue
                conn.execute("RELEASE op")
                notes.extend(call_notes)
                results.append((call, value, None))
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            error = StorageError(f"metadata store commit failed: {exc}")
            results = [(call, None, error) for call in batch]
            notes = []
        self._written(batch)
        loops: dict[asyncio.AbstractEventLoop, list[tuple[_Call, Any, BaseException | None]]] = {}
        for res in results:
            loops.setdefault(res[0].loop, []).append(res)
        for loop, items in loops.items():
            try:
                loop.call_soon_threadsafe(self._deliver, items, notes)
            except RuntimeError:
                continue  # that loop is closed: nobody is waiting any more
            notes = []  # listeners hear each change once

    def _deliver(
        self, items: list[tuple[_Call, Any, BaseException | None]], notes: list[Notification]
    ) -> None:
        for call, value, error in items:
            _resolve(call.future, value, error)
        if notes:
            self._notify(notes)
