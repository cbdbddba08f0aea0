"""Topic list watchers (PIP-145): the first listing and the updates after it."""

from __future__ import annotations

import asyncio

from magnetar.broker.service.topic_watchers import TopicListWatchers

NS = "public/default"
A = "persistent://public/default/pw-a"
B = "persistent://public/default/pw-b"


class Updates:
    """The watcher connection's side: the updates it was told."""

    def __init__(self) -> None:
        self.got: list[tuple[int, list[str], list[str]]] = []
        self.arrived = asyncio.Event()

    def watch_topic_update(
        self, watcher_id: int, new: list[str], deleted: list[str], digest: str
    ) -> None:
        self.got.append((watcher_id, new, deleted))
        self.arrived.set()


async def test_topic_created_while_the_first_listing_runs_is_told() -> None:
    """SEM-1: a pattern consumer follows topics created after it subscribed;
    a topic that appears while the watcher's first listing is still running
    (its change fires before the watcher is registered) reaches the client as
    an update right after the answer."""
    topics = [A]
    listing_started = asyncio.Event()
    release = asyncio.Event()
    first = True

    async def list_topics(namespace: str) -> list[str]:
        nonlocal first
        snapshot = list(topics)
        if first:
            first = False
            listing_started.set()
            await release.wait()
        return snapshot

    watchers = TopicListWatchers(list_topics)
    updates = Updates()
    watch = asyncio.create_task(watchers.watch(updates, 7, NS, "persistent://public/default/pw-.*"))
    await listing_started.wait()
    topics.append(B)
    watchers.namespace_changed(NS)
    release.set()
    listed, _digest = await watch
    assert listed == [A]
    await asyncio.wait_for(updates.arrived.wait(), 5)
    assert updates.got == [(7, [B], [])]
    await watchers.stop()


async def test_no_change_while_listing_sends_no_update() -> None:
    """SEM-1: without a change the first answer is all the client gets."""

    async def list_topics(namespace: str) -> list[str]:
        return [A]

    watchers = TopicListWatchers(list_topics)
    updates = Updates()
    listed, _digest = await watchers.watch(updates, 1, NS, "persistent://public/default/pw-.*")
    assert listed == [A]
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert updates.got == []
    await watchers.stop()
