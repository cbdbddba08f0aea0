"""Managed ledgers on a real SeaweedFS: appends become one object per round,
reads come back from the objects after a restart, the owner's fence stops an
old owner, a truncated object is an error naming it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from magnetar.broker.storage.api import (
    InitialPosition,
    ManagedLedgerConfig,
    MetadataStore,
    StorageError,
)
from magnetar.broker.storage.metadata import SqliteMetadataStore
from magnetar.broker.storage.objects.extents import extent_node, extents_path
from magnetar.broker.storage.objects.factory import ObjectManagedLedgerFactory
from magnetar.broker.storage.objects.journal import ROUNDS_PREFIX
from magnetar.broker.storage.objects.sealer import LEDGERS_PREFIX
from magnetar.broker.storage.objects.store import ObjectStore, ObjectStoreConfig
from tests.support.seaweedfs import SeaweedServer

Opener = Callable[..., Awaitable[ObjectManagedLedgerFactory]]


@pytest.fixture
async def open_factory(
    seaweedfs: SeaweedServer, object_store_url: str, tmp_path: Path
) -> AsyncIterator[Opener]:
    opened: list[ObjectManagedLedgerFactory] = []

    async def make(
        data_dir: Path = tmp_path / "broker", store: MetadataStore | None = None, **kw: object
    ) -> ObjectManagedLedgerFactory:
        factory = await ObjectManagedLedgerFactory.open_on(
            ObjectStoreConfig(object_store_url, endpoint=seaweedfs.endpoint),
            str(data_dir),
            ManagedLedgerConfig(),
            store=store,
            shared=store is not None,
            **kw,  # type: ignore[arg-type]
        )
        opened.append(factory)
        return factory

    yield make
    for factory in opened:
        await factory.close()


def _bucket(seaweedfs: SeaweedServer, url: str) -> ObjectStore:
    return ObjectStore(ObjectStoreConfig(url, endpoint=seaweedfs.endpoint))


async def test_entries_written_come_back_after_a_restart(open_factory: Opener) -> None:
    factory = await open_factory()
    ml = await factory.open("tenant/ns/persistent/t1")
    cursor = await ml.open_cursor("sub", InitialPosition.EARLIEST)
    positions = []
    for burst in range(5):
        positions += await asyncio.gather(
            *(ml.add_entry(f"m-{burst}-{i}".encode(), 1) for i in range(40))
        )
    assert positions == sorted(positions)
    entries = await cursor.read_entries(500)
    assert [e.data for e in entries] == [f"m-{b}-{i}".encode() for b in range(5) for i in range(40)]
    await factory.close()

    # A new process: the index comes from the extents, the data from objects.
    factory = await open_factory()
    ml = await factory.open("tenant/ns/persistent/t1")
    assert ml.number_of_entries == 200
    cursor = await ml.open_cursor("sub", InitialPosition.EARLIEST)
    entries = await cursor.read_entries(500)
    assert [e.position for e in entries] == positions
    assert entries[-1].data == b"m-4-39"
    # And it takes appends after them.
    more = await ml.add_entry(b"after", 1)
    assert more > positions[-1]


async def test_one_round_is_one_object_for_many_topics(
    open_factory: Opener, seaweedfs: SeaweedServer, object_store_url: str
) -> None:
    """DESIGN "Processes": a broker's appends for all its topics in one round
    go into one object."""
    factory = await open_factory(max_in_flight=1)
    ledgers = [await factory.open(f"t/ns/persistent/topic-{i}") for i in range(60)]
    bucket = _bucket(seaweedfs, object_store_url)
    before = len(await bucket.list_objects(ROUNDS_PREFIX))
    # Hold the journal with one round in flight, queue one entry on each topic.
    await asyncio.gather(*(ml.add_entry(b"x", 1) for ml in ledgers[:1]))
    await asyncio.gather(*(ml.add_entry(f"to {i}".encode(), 1) for i, ml in enumerate(ledgers)))
    rounds = len(await bucket.list_objects(ROUNDS_PREFIX)) - before
    assert 2 <= rounds <= 3, rounds  # 61 appends, at most one round more than needed


async def test_a_new_owner_fences_the_old_one(open_factory: Opener, tmp_path: Path) -> None:
    store = await SqliteMetadataStore.open(str(tmp_path / "shared.db"))
    try:
        old = await open_factory(tmp_path / "a", store=store)
        new = await open_factory(tmp_path / "b", store=store)
        ml_old = await old.open("t/ns/persistent/owned")
        await ml_old.open_cursor("c", InitialPosition.EARLIEST)  # keeps the data
        first = await ml_old.add_entry(b"by the old owner", 1)

        ml_new = await new.open("t/ns/persistent/owned")
        with pytest.raises(StorageError, match="fenced"):
            await ml_old.add_entry(b"after the fence", 1)
        second = await ml_new.add_entry(b"by the new owner", 1)
        cursor = await ml_new.open_cursor("c", InitialPosition.EARLIEST)
        entries = await cursor.read_entries(10)
        assert [(e.position, e.data) for e in entries] == [
            (first, b"by the old owner"),
            (second, b"by the new owner"),
        ]
    finally:
        for f in (old, new):
            await f.close()
        await store.close()


async def test_a_truncated_object_is_an_error_naming_it(
    open_factory: Opener, seaweedfs: SeaweedServer, object_store_url: str
) -> None:
    factory = await open_factory()
    ml = await factory.open("t/ns/persistent/cut")
    await ml.open_cursor("c", InitialPosition.EARLIEST)
    await asyncio.gather(*(ml.add_entry(b"%05d" % i, 1) for i in range(20)))
    await factory.close()
    bucket = _bucket(seaweedfs, object_store_url)
    (obj,) = [o for o in await bucket.list_objects(ROUNDS_PREFIX)]
    data = await bucket.get(obj.key)
    await bucket.put(obj.key, data[: len(data) // 2], create=False)

    factory = await open_factory()
    ml = await factory.open("t/ns/persistent/cut")
    cursor = await ml.open_cursor("c", InitialPosition.EARLIEST)
    with pytest.raises(StorageError, match=obj.key):
        await cursor.read_entries(20)


async def test_the_collector_deletes_only_objects_no_extent_names(
    open_factory: Opener, seaweedfs: SeaweedServer, object_store_url: str
) -> None:
    """An object goes once no extent names it and it is older than the grace
    (so a round between its PUT and its commit is never taken)."""
    factory = await open_factory(collect_interval_s=0)
    kept = await factory.open("t/ns/persistent/kept")
    gone = await factory.open("t/ns/persistent/gone")
    await kept.open_cursor("c", InitialPosition.EARLIEST)
    await gone.open_cursor("c", InitialPosition.EARLIEST)
    for i in range(3):  # separate rounds: some objects hold one topic only
        await kept.add_entry(b"k%d" % i, 1)
        await gone.add_entry(b"g%d" % i, 1)
    bucket = _bucket(seaweedfs, object_store_url)
    orphan = f"{ROUNDS_PREFIX}crashed-broker/000000000001"
    await bucket.put(orphan, b"a round whose commit never happened")
    everything = {o.key for o in await bucket.list_objects(ROUNDS_PREFIX)}
    await factory.delete("t/ns/persistent/gone")

    collector = factory.collector
    live = await collector.live_keys()
    assert orphan not in live and live < everything
    # Within the grace nothing goes, named or not.
    assert await collector.collect_once() == 0
    collector.grace_s = 0.0
    collector._clock = lambda: 4_000_000_000.0  # every object is old now
    deleted = await collector.collect_once()
    left = {o.key for o in await bucket.list_objects(ROUNDS_PREFIX)}
    assert left == live and deleted == len(everything) - len(live)
    assert orphan not in left
    # What is named still reads.
    cursor = await kept.open_cursor("again", InitialPosition.EARLIEST)
    kept_ml = factory.open_ledgers["t/ns/persistent/kept"]
    for info in kept_ml.layout.infos():
        info.cache.clear()  # from the objects, not the cache
    assert [e.data for e in await cursor.read_entries(10)] == [b"k0", b"k1", b"k2"]


async def test_sealed_ledgers_become_one_object_each(
    open_factory: Opener, seaweedfs: SeaweedServer, object_store_url: str, tmp_path: Path
) -> None:
    """A rolled-over ledger is rewritten into one object and one extent; the
    round objects it leaves are garbage; everything still reads, also after
    a death between the sealed extent's commit and the round extents' removal."""
    config = ManagedLedgerConfig(max_entries_per_ledger=10, min_rollover_time_s=0)
    meta = await SqliteMetadataStore.open(str(tmp_path / "m.db"))
    try:
        await _sealing(open_factory, seaweedfs, object_store_url, config, meta)
    finally:
        await meta.close()


async def _sealing(
    open_factory: Opener,
    seaweedfs: SeaweedServer,
    object_store_url: str,
    config: ManagedLedgerConfig,
    meta: MetadataStore,
) -> None:
    factory = await open_factory(store=meta, collect_interval_s=0)
    ml = await factory.open_impl("t/ns/persistent/sealed", config)
    await ml.open_cursor("c", InitialPosition.EARLIEST)
    for i in range(35):
        await ml.add_entry(b"e%02d" % i, 1)
    await factory.close()  # awaits the sealing in flight

    bucket = _bucket(seaweedfs, object_store_url)
    sealed = sorted(o.key for o in await bucket.list_objects(LEDGERS_PREFIX))
    assert len(sealed) == 3  # three full ledgers rolled over; the fourth was current
    topic = extents_path("t/ns/persistent/sealed")
    ledger_ids = await meta.get_children(topic)
    nodes = {lid: await meta.get_children(f"{topic}/{lid}") for lid in ledger_ids}
    assert sum(len(v) == 1 and "@ledgers|" in v[0] for v in nodes.values()) == 3

    # Died before dropping the round extents: put one back as a leftover.
    lid = sorted(ledger_ids, key=int)[0]
    leftover = f"{topic}/{lid}/{extent_node(0, ROUNDS_PREFIX + 'x/000000000001')}"
    await meta.put(leftover, b"a leftover round extent")

    factory = await open_factory(store=meta, collect_interval_s=0)
    ml = await factory.open_impl("t/ns/persistent/sealed", config)
    assert not await meta.exists(leftover)

    # The ledger that was current is closed by this open, and sealed now
    # (done once its round extents are gone: collecting before that could
    # take the ledger object between its upload and its commit).
    async def sealed_ledgers() -> int:
        ids = await meta.get_children(topic)
        nodes = [await meta.get_children(f"{topic}/{i}") for i in ids]
        return sum(len(n) == 1 and "@ledgers|" in n[0] for n in nodes)

    for _ in range(200):
        if await sealed_ledgers() == 4:
            break
        await asyncio.sleep(0.05)
    factory.collector.grace_s = 0.0
    factory.collector._clock = lambda: 4_000_000_000.0
    await factory.collector.collect_once()
    # Every round object is garbage now: four ledgers, four objects.
    left = {o.key for o in await bucket.list_objects("")}
    assert len(left) == 4 and left > set(sealed)
    assert left == await factory.collector.live_keys()
    cursor = await ml.open_cursor("again", InitialPosition.EARLIEST)
    entries = await cursor.read_entries(100)
    assert [e.data for e in entries] == [b"e%02d" % i for i in range(35)]


async def test_a_store_that_stops_delays_receipts_and_loses_nothing(tmp_path: Path) -> None:
    """While the object store is frozen no append is acknowledged; once it is
    back every append is, in order, and reads back."""
    server = SeaweedServer(tmp_path / "weed").start()
    factory: ObjectManagedLedgerFactory | None = None
    try:
        config = ObjectStoreConfig(
            "s3://magnetar/stops",
            endpoint=server.endpoint,
            request_timeout_s=2.0,
            connect_timeout_s=1.0,
            max_retries=0,
        )
        with pytest.MonkeyPatch.context() as env:
            for key, value in server.env().items():
                env.setenv(key, value)
            await server.warm_up("s3://magnetar/stops")
            factory = await ObjectManagedLedgerFactory.open_on(
                config, str(tmp_path / "broker"), collect_interval_s=0
            )
            ml = await factory.open("t/ns/persistent/stops")
            await ml.open_cursor("c", InitialPosition.EARLIEST)
            first = await ml.add_entry(b"before", 1)
            server.pause()
            during = [ml.add_entry(b"during %d" % i, 1) for i in range(20)]
            done, _ = await asyncio.wait(during, timeout=5.0)
            assert not done, "a receipt for data the store never took"
            server.resume()
            positions = await asyncio.wait_for(asyncio.gather(*during), 30)
            assert positions == sorted(positions) and positions[0] > first
            cursor = await ml.open_cursor("again", InitialPosition.EARLIEST)
            for info in factory.open_ledgers["t/ns/persistent/stops"].layout.infos():
                info.cache.clear()
            entries = await cursor.read_entries(100)
            assert [e.data for e in entries] == [b"before"] + [b"during %d" % i for i in range(20)]
    finally:
        if factory is not None:
            await factory.close()
        server.stop()


async def test_a_catch_up_reader_does_not_pay_a_get_per_read(open_factory: Opener) -> None:
    """Reads from the objects fetch ahead: a consumer taking ten entries at a
    time through a 300-entry backlog costs a few GETs, not thirty reads' worth."""
    factory = await open_factory(collect_interval_s=0)
    ml = await factory.open("t/ns/persistent/behind")
    await ml.open_cursor("c", InitialPosition.EARLIEST)
    for burst in range(3):
        await asyncio.gather(*(ml.add_entry(b"%d-%03d" % (burst, i), 1) for i in range(100)))
    await factory.close()

    factory = await open_factory(collect_interval_s=0)
    ml = await factory.open("t/ns/persistent/behind")
    cursor = await ml.open_cursor("c", InitialPosition.EARLIEST)
    gets = _sample_gets()
    got = []
    while batch := await cursor.read_entries(10):
        got += batch
    assert len(got) == 300
    assert _sample_gets() - gets <= 8


def _sample_gets() -> float:
    from prometheus_client import CollectorRegistry

    from magnetar.broker.storage import metrics

    registry = CollectorRegistry()
    metrics.register(registry)
    value = registry.get_sample_value("magnetar_object_store_requests_total", {"kind": "get"})
    return 0.0 if value is None else value


async def test_a_steady_reader_finds_the_next_window_fetched(
    open_factory: Opener, seaweedfs: SeaweedServer, object_store_url: str
) -> None:
    """A large ledger being written is sealed as its managed ledger closes;
    a reader going through it after a restart finds each next window already
    fetched in the background (one GET a window, none waited for past the
    first), and a factory closing with a prefetch in flight leaves no task."""
    name = "t/ns/persistent/windows"
    factory = await open_factory(collect_interval_s=0)
    ml = await factory.open(name)
    await ml.open_cursor("c", InitialPosition.EARLIEST)
    body = bytes(range(256)) * 8  # 2 KiB
    for burst in range(6):
        await asyncio.gather(
            *(ml.add_entry(b"%04d" % (burst * 100 + i) + body, 1) for i in range(100))
        )
    await factory.close()
    bucket = _bucket(seaweedfs, object_store_url)
    assert len(await bucket.list_objects(LEDGERS_PREFIX)) == 1  # sealed on close

    factory = await open_factory(collect_interval_s=0)
    factory.read_ahead.window = 128 * 1024  # ten windows in the ledger
    ml = await factory.open(name)
    cursor = await ml.open_cursor("c", InitialPosition.EARLIEST)
    gets = _sample_gets()
    got = []
    while batch := await cursor.read_entries(8):
        got += batch
    assert [int(e.data[:4]) for e in got] == list(range(600))
    size = factory.open_ledgers[name].layout.infos()[0].file.size
    windows = -(-size // factory.read_ahead.window)
    assert factory.read_ahead.prefetch_hits >= windows - 2
    assert _sample_gets() - gets <= windows + 1

    # Back to the start: a seek drops the prefetch that is not wanted.
    await cursor.reset_cursor(got[0].position)
    assert len(await cursor.read_entries(8)) == 8
    assert len(await cursor.read_entries(8)) == 8  # back for more: a prefetch starts
    await factory.close()
    assert factory.read_ahead.size == 0 and not factory.read_ahead.tasks()
