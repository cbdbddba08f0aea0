"""Bundle ownership on a real etcd, two members in one process: LOOKUP
answers, assignment on the authoritative lookup, hand-over, lease expiry,
and the session deadline taken from an injected clock."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from magnetar.broker.cluster.bundles import bundle_of
from magnetar.broker.cluster.etcd_store import EtcdMetadataStore
from magnetar.broker.cluster.member import ClusterMember
from magnetar.broker.config import BrokerConfig
from magnetar.broker.errors import ServiceNotReadyError
from magnetar.broker.service.lookup import LookupAnswer
from magnetar.proto.naming import TopicName
from tests.support.etcd import EtcdServer

TOPIC = TopicName.parse("persistent://public/default/owned")


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


Join = Callable[[str], Awaitable[ClusterMember]]


@pytest.fixture
async def join(etcd: EtcdServer, tmp_path: Path) -> AsyncIterator[Join]:
    opened: list[tuple[EtcdMetadataStore, ClusterMember]] = []

    async def make(name: str) -> ClusterMember:
        store = await EtcdMetadataStore.connect(etcd.url)
        config = BrokerConfig(data_dir=tmp_path, metadata_url=etcd.url, cluster_lease_seconds=2)
        member = ClusterMember(store.client, config)
        await member.open_session()
        await member.join(f"pulsar://{name}", f"pulsar+ssl://{name}", f"http://{name}")
        opened.append((store, member))
        return member

    yield make
    for store, member in opened:
        await member.close()
        await store.close()


async def test_lookup_assigns_on_the_authoritative_lookup_and_redirects_to_the_owner(
    join: Join,
) -> None:
    a, b = await join("a:1"), await join("b:1")
    first = await a.lookup(TOPIC, authoritative=False)
    # Whoever the load manager picked, the authoritative lookup there takes it.
    owner, other = (a, b) if not first.redirect else (b, a)
    if first.redirect:
        assert first.url == "pulsar://b:1"
        assert await b.lookup(TOPIC, authoritative=True) == LookupAnswer(
            "pulsar://b:1", "pulsar+ssl://b:1"
        )
    assert await owner.lookup(TOPIC, authoritative=False) == LookupAnswer(
        owner.info.service_url if owner.info else "",
        owner.info.service_url_tls if owner.info else "",
    )
    answer = await other.lookup(TOPIC, authoritative=True)
    assert answer.redirect and owner.info is not None and answer.url == owner.info.service_url
    await owner.check_owner(TOPIC)
    with pytest.raises(ServiceNotReadyError):
        await other.check_owner(TOPIC)


async def test_unload_hands_the_bundle_to_the_other_broker(join: Join) -> None:
    a, b = await join("a:1"), await join("b:1")
    assert not (await a.lookup(TOPIC, authoritative=True)).redirect
    assert b.info is not None
    assert await a.unload(bundle_of(TOPIC, 4)) == b.info.broker_id
    assert not a.still_owns(TOPIC)
    answer = await a.lookup(TOPIC, authoritative=False)
    assert answer.redirect and answer.url == "pulsar://b:1"
    await b.check_owner(TOPIC)


async def test_a_revoked_lease_frees_the_bundles(join: Join) -> None:
    a, b = await join("a:1"), await join("b:1")
    assert not (await a.lookup(TOPIC, authoritative=True)).redirect
    assert a.session is not None
    await a.client.revoke_lease(a.session.lease_id)
    answer = await b.lookup(TOPIC, authoritative=False)
    assert not answer.redirect and answer.url == "pulsar://b:1"


async def test_the_session_holds_only_until_its_deadline(etcd: EtcdServer) -> None:
    store = await EtcdMetadataStore.connect(etcd.url)
    clock = FakeClock()
    config = BrokerConfig(metadata_url=etcd.url, cluster_lease_seconds=5)
    member = ClusterMember(store.client, config, clock=clock)
    try:
        await member.open_session()
        await member.join("pulsar://a:1", "pulsar+ssl://a:1", "http://a:1")
        assert not (await member.lookup(TOPIC, authoritative=True)).redirect
        assert member.write_guard() is None
        clock.now += 3.9  # the TTL less the margin (a fifth) is 4 s
        assert member.write_guard() is None
        clock.now += 0.2
        assert member.write_guard() is not None
        with pytest.raises(ServiceNotReadyError):
            await member.lookup(TOPIC, authoritative=True)
    finally:
        await member.close()
        await store.close()
