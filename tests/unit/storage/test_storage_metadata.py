"""The MetadataStore backends (embedded SQLite, etcd): get / put with
version / delete / children / watch, with the same answers from both."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from magnetar.broker.cluster.etcd_store import EtcdMetadataStore
from magnetar.broker.storage import (
    BadVersion,
    MetadataStore,
    MetadataStoreClosed,
    NotEmpty,
    NotFound,
    Notification,
    NotificationType,
    SqliteMetadataStore,
)
from magnetar.broker.storage.metadata_api import MAX_COMMIT_OPS, Check, Delete, Put
from tests.support.etcd import EtcdServer

Opener = Callable[[], Awaitable[MetadataStore]]


@pytest.fixture(params=["sqlite", "etcd"])
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Opener:
    """Opens a store on the same data each call (a reopen sees earlier puts)."""
    if request.param == "sqlite":
        return lambda: SqliteMetadataStore.open(str(tmp_path / "m.db"))
    server: EtcdServer = request.getfixturevalue("etcd")
    return lambda: EtcdMetadataStore.connect(server.url)


async def test_put_get_and_versions(open_store: Opener) -> None:
    store = await open_store()
    try:
        assert await store.get("/a/b") is None
        stat = await store.put("/a/b", b"one")
        assert stat.version == 0
        got = await store.get("/a/b")
        assert got is not None and got.value == b"one" and got.stat.version == 0
        stat = await store.put("/a/b", b"two", expected_version=0)
        assert stat.version == 1
        with pytest.raises(BadVersion):
            await store.put("/a/b", b"three", expected_version=0)
        with pytest.raises(BadVersion):
            await store.put("/a/b", b"three", expected_version=-1)
        with pytest.raises(BadVersion):
            await store.put("/a/new", b"x", expected_version=3)
        assert (await store.put("/a/new", b"x", expected_version=-1)).version == 0
        got = await store.get("/a/b")
        assert got is not None and got.value == b"two"
    finally:
        await store.close()


async def test_parents_children_and_delete(open_store: Opener) -> None:
    store = await open_store()
    try:
        await store.put("/x/y/z1", b"1")
        await store.put("/x/y/z2", b"2")
        await store.put("/x/y_/w", b"3")  # '_' and '%' must not act as wildcards
        assert await store.exists("/x/y")
        assert await store.get_children("/x/y") == ["z1", "z2"]
        assert await store.get_children("/x") == ["y", "y_"]
        assert await store.get_children("/") == ["x"]
        with pytest.raises(NotEmpty):
            await store.delete("/x/y")
        with pytest.raises(BadVersion):
            await store.delete("/x/y/z1", expected_version=5)
        await store.delete("/x/y/z1", expected_version=0)
        with pytest.raises(NotFound):
            await store.delete("/x/y/z1")
        await store.delete_recursive("/x/y")
        assert not await store.exists("/x/y")
        assert not await store.exists("/x/y/z2")
        assert await store.exists("/x/y_/w")
        await store.delete_recursive("/nothing/here")
    finally:
        await store.close()


async def test_data_survives_reopen(open_store: Opener) -> None:
    store = await open_store()
    await store.put("/k", b"v")
    await store.put("/k", b"v2")
    await store.close()
    store = await open_store()
    try:
        got = await store.get("/k")
        assert got is not None and got.value == b"v2" and got.stat.version == 1
    finally:
        await store.close()


async def test_concurrent_compare_and_set_lets_exactly_one_win(open_store: Opener) -> None:
    store = await open_store()
    try:
        await store.put("/c", b"0")
        results = await asyncio.gather(
            *[store.put("/c", str(i).encode(), expected_version=0) for i in range(20)],
            return_exceptions=True,
        )
        assert sum(1 for r in results if not isinstance(r, BaseException)) == 1
        assert all(isinstance(r, BadVersion) for r in results if isinstance(r, BaseException))
        got = await store.get("/c")
        assert got is not None and got.stat.version == 1
    finally:
        await store.close()


async def test_commit_applies_all_or_nothing(open_store: Opener) -> None:
    store = await open_store()
    try:
        await store.put("/fence", b"owner-1")
        await store.put("/old", b"gone soon")
        stats = await store.commit(
            [
                Check("/fence", 0),
                Put("/idx/1/0", b"extent a", expected_version=-1),
                Put("/idx/2/0", b"extent b"),
                Delete("/old"),
            ]
        )
        assert [s.version if s else None for s in stats] == [None, 0, 0, None]
        assert (await store.get("/idx/1/0")).value == b"extent a"  # type: ignore[union-attr]
        assert await store.get("/old") is None
        assert await store.get_children("/idx") == ["1", "2"]

        # The fence moved: nothing of this commit lands.
        await store.put("/fence", b"owner-2")
        with pytest.raises(BadVersion, match="/fence"):
            await store.commit([Put("/idx/1/5", b"late"), Check("/fence", 0)])
        assert await store.get("/idx/1/5") is None
        # A failed create-only put undoes the others too.
        with pytest.raises(BadVersion):
            await store.commit([Put("/idx/3/0", b"x"), Put("/idx/1/0", b"y", expected_version=-1)])
        assert await store.get("/idx/3/0") is None
        assert (await store.get("/idx/1/0")).value == b"extent a"  # type: ignore[union-attr]
        with pytest.raises(NotEmpty):
            await store.commit([Put("/idx/4/0", b"x"), Delete("/idx")])
        assert await store.get("/idx/4/0") is None
        with pytest.raises(NotFound):
            await store.commit([Delete("/never")])

        with pytest.raises(ValueError, match="twice"):
            await store.commit([Put("/d", b"1"), Check("/d", 0)])
        with pytest.raises(ValueError, match="at most"):
            await store.commit([Put(f"/many/{i}", b"") for i in range(MAX_COMMIT_OPS + 1)])
    finally:
        await store.close()


async def test_a_commit_of_creations_only_is_all_or_nothing_too(open_store: Opener) -> None:
    """New ledgers' first records are stored so, in batches (births.py)."""
    store = await open_store()
    heard: list[Notification] = []
    store.register_listener(heard.append)
    try:
        stats = await store.commit([Put(f"/new/{i}", b"r%d" % i, -1) for i in range(3)])
        assert [s.version if s else None for s in stats] == [0, 0, 0]
        assert await store.get_children("/new") == ["0", "1", "2"]
        assert (await store.get("/new/1")).value == b"r1"  # type: ignore[union-attr]
        await asyncio.sleep(0)
        assert Notification(NotificationType.CREATED, "/new") in heard
        assert Notification(NotificationType.CREATED, "/new/2") in heard
        assert Notification(NotificationType.CHILDREN_CHANGED, "/new") in heard
        with pytest.raises(BadVersion, match="/new/1"):
            await store.commit([Put("/new/3", b"", -1), Put("/new/1", b"", -1)])
        assert await store.get("/new/3") is None
    finally:
        await store.close()


async def test_concurrent_commits_under_one_fence_let_exactly_one_win(
    open_store: Opener,
) -> None:
    store = await open_store()
    try:
        await store.put("/fence", b"")
        results = await asyncio.gather(
            *[
                store.commit([Put("/fence", str(i).encode(), 0), Put(f"/w/{i}", b"won")])
                for i in range(10)
            ],
            return_exceptions=True,
        )
        winners = [i for i, r in enumerate(results) if not isinstance(r, BaseException)]
        assert len(winners) == 1
        assert await store.get_children("/w") == [str(winners[0])]
    finally:
        await store.close()


async def test_listeners_hear_changes(open_store: Opener) -> None:
    store = await open_store()
    heard: list[Notification] = []
    unregister = store.register_listener(heard.append)
    try:
        await store.put("/n/a", b"1")
        await store.put("/n/a", b"2")
        await store.delete("/n/a")
        await asyncio.sleep(0)
        assert Notification(NotificationType.CREATED, "/n") in heard
        assert Notification(NotificationType.CREATED, "/n/a") in heard
        assert Notification(NotificationType.MODIFIED, "/n/a") in heard
        assert Notification(NotificationType.DELETED, "/n/a") in heard
        assert Notification(NotificationType.CHILDREN_CHANGED, "/n") in heard
        unregister()
        count = len(heard)
        await store.put("/n/b", b"1")
        await asyncio.sleep(0)
        assert len(heard) == count
    finally:
        await store.close()


async def test_close_is_idempotent_and_later_calls_fail(open_store: Opener) -> None:
    store = await open_store()
    await store.put("/a", b"1")
    await store.close()
    await store.close()
    with pytest.raises(MetadataStoreClosed):
        await store.get("/a")


async def test_invalid_paths_are_refused(open_store: Opener) -> None:
    store = await open_store()
    try:
        for bad in ("a", "/a/", "/a//b", ""):
            with pytest.raises(ValueError):
                await store.put(bad, b"")
    finally:
        await store.close()


async def test_wal_mode_is_on(tmp_path: Path) -> None:
    import sqlite3

    path = str(tmp_path / "m.db")
    store = await SqliteMetadataStore.open(path)
    await store.put("/a", b"1")
    await store.close()
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        conn.close()


async def test_sqlite_reads_see_the_writes_submitted_before_them(tmp_path: Path) -> None:
    """A read issued after a put or delete was submitted (not yet answered)
    sees it: reads of the embedded store never overtake the caller's own
    writes (etcd promises this only for awaited writes)."""
    store = await SqliteMetadataStore.open(str(tmp_path / "m.db"))
    try:
        await store.put("/r/old/x", b"0")
        put = asyncio.ensure_future(store.put("/r/new/x", b"1"))
        gone = asyncio.ensure_future(store.delete_recursive("/r/old"))
        await asyncio.sleep(0)  # both submitted, neither awaited
        got = await store.get("/r/new/x")
        assert got is not None and got.value == b"1"
        assert await store.exists("/r/new")
        assert await store.get("/r/old/x") is None
        await asyncio.gather(put, gone)
    finally:
        await store.close()


async def test_sqlite_point_reads_do_not_wait_for_the_writer(tmp_path: Path) -> None:
    """Reads of the embedded store run on a reader connection: while the
    writer thread is busy they still answer, except for a path with a write
    queued behind it, which waits for that write."""
    import threading

    store = await SqliteMetadataStore.open(str(tmp_path / "m.db"))
    held = threading.Event()
    try:
        await store.put("/a", b"1")
        # Occupy the writer thread with a call that waits for the test.
        busy = asyncio.ensure_future(store._submit(lambda _c, _n: held.wait(10)))
        queued = asyncio.ensure_future(store.put("/b", b"2"))
        await asyncio.sleep(0)
        got = await asyncio.wait_for(store.get("/a"), 2)
        assert got is not None and got.value == b"1"
        assert await asyncio.wait_for(store.exists("/a"), 2)
        waiting = asyncio.ensure_future(store.get("/b"))
        await asyncio.sleep(0.05)
        assert not waiting.done()  # its put is still queued
        held.set()
        await asyncio.gather(busy, queued)
        found = await waiting
        assert found is not None and found.value == b"2"
    finally:
        held.set()
        await store.close()
