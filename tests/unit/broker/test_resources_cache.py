"""PulsarResources' read cache on the embedded store: a node under a parent
known to be absent is absent without a read, until the parent is made; the
names the first topic needs are read at start."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from magnetar.broker.resources import PulsarResources
from magnetar.broker.storage import SqliteMetadataStore
from magnetar.proto.naming import TopicName


@pytest.fixture
async def resources(tmp_path: Path) -> AsyncIterator[PulsarResources]:
    store = await SqliteMetadataStore.open(str(tmp_path / "m.db"))
    found = PulsarResources(store, "standalone")
    await found.ensure_defaults("pulsar://localhost:6650", "http://localhost:8080")
    yield found
    await store.close()


def count_store_reads(resources: PulsarResources, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    paths: list[str] = []
    real = resources.store.get

    async def get(path: str) -> Any:
        paths.append(path)
        return await real(path)

    monkeypatch.setattr(resources.store, "get", get)
    return paths


async def test_new_topics_of_a_warm_namespace_cost_no_read(
    resources: PulsarResources, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads = count_store_reads(resources, monkeypatch)
    for i in range(3):
        topic = TopicName.parse(f"persistent://public/default/new-{i}")
        assert await resources.get_partitions(topic) == 0
        assert await resources.get_topic_policies(topic) == {}
        assert await resources.get_terminated(topic) is None
        assert await resources.get_policies("public", "default") == {}
    assert reads == []


async def test_a_node_made_under_an_absent_parent_is_read_again(
    resources: PulsarResources,
) -> None:
    topic = TopicName.parse("persistent://public/default/p")
    assert await resources.get_partitions(topic) == 0
    await resources.create_partitioned_topic(topic, 3)
    assert await resources.get_partitions(topic) == 3
    await resources.set_terminated(TopicName.parse("persistent://public/default/t"), 4, 2)
    assert await resources.get_terminated(TopicName.parse("persistent://public/default/t")) == (
        4,
        2,
    )
    await resources.delete_partitioned_topic(topic)
    assert await resources.get_partitions(topic) == 0


async def test_other_namespaces_are_read_once_per_parent(
    resources: PulsarResources, monkeypatch: pytest.MonkeyPatch
) -> None:
    await resources.create_namespace("public", "other", {"x": 1})
    reads = count_store_reads(resources, monkeypatch)
    for i in range(3):
        await resources.get_partitions(TopicName.parse(f"persistent://public/other/t{i}"))
    assert reads == ["/admin/partitioned-topics/public/other/persistent"]
    assert await resources.get_policies("public", "other") == {"x": 1}
