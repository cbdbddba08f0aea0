"""Topic list watchers (protocol v20, Pulsar's PIP-145) on our broker: the
WATCH_TOPIC_LIST conversation itself through our client's connection, and a
pattern consumer of our client picking up a new topic through its watcher
long before its discovery period would (SEM-1 regex subscriptions)."""

from __future__ import annotations

import asyncio
import re
import uuid

import pytest

import magnetar.client as magnetar_client
from magnetar.client.aio.errors import PulsarException
from magnetar.client.aio.net.connection import ClientConnection
from magnetar.proto import pulsar_api_pb2 as pb
from tests.support.brokers import BrokerThread
from tests.support.http_calls import http_call


class Updates:
    """A watcher endpoint that records what the broker pushes."""

    def __init__(self) -> None:
        self.got: list[tuple[list[str], list[str]]] = []
        self.changed = asyncio.Event()
        self.lost = False

    def handle_topic_update(self, update: pb.CommandWatchTopicUpdate) -> None:
        self.got.append((list(update.new_topics), list(update.deleted_topics)))
        self.changed.set()

    def connection_closed(self, cnx: ClientConnection) -> None:
        self.lost = True

    async def next(self) -> tuple[list[str], list[str]]:
        await asyncio.wait_for(self.changed.wait(), 10)
        self.changed.clear()
        return self.got.pop(0)


async def _watch(cnx: ClientConnection, watcher_id: int, pattern: str) -> pb.BaseCommand:
    request_id = cnx.new_request_id()
    frame = await cnx.request(
        pb.CommandWatchTopicList(
            request_id=request_id,
            watcher_id=watcher_id,
            namespace="public/default",
            topics_pattern=pattern,
        ),
        request_id,
    )
    return frame.command


def _admin(broker: BrokerThread, method: str, topic: str, suffix: str = "", body: object = None):  # type: ignore[no-untyped-def]
    path = topic.replace("://", "/")
    return http_call(method, f"{broker.http_url}/admin/v2/{path}{suffix}", body)


def test_watch_topic_list_conversation(broker: BrokerThread) -> None:
    """CONNECTED offers watchers; WATCH_TOPIC_LIST answers the matching
    persistent topics and their hash; creating a topic, creating a
    partitioned topic and deleting a topic each push WATCH_TOPIC_UPDATE with
    just the difference; topics outside the pattern push nothing; a bad regex
    is refused; after WATCH_TOPIC_LIST_CLOSE nothing more comes."""
    tag = f"w{uuid.uuid4().hex[:6]}"
    base = f"persistent://public/default/{tag}"

    async def scenario() -> None:
        assert _admin(broker, "PUT", f"{base}-a") == (204, None)
        host = broker.url.split("://", 1)[1].rstrip("/")
        cnx = await ClientConnection.open(host, operation_timeout=10)
        try:
            assert cnx.supports_topic_watchers
            updates = Updates()
            cnx.register_watcher(7, updates)
            success = (await _watch(cnx, 7, f"{base}-.*")).watchTopicListSuccess
            assert (success.watcher_id, list(success.topic)) == (7, [f"{base}-a"])
            first_hash = success.topics_hash
            assert first_hash

            assert _admin(broker, "PUT", f"persistent://public/default/other-{tag}") == (204, None)
            assert _admin(broker, "PUT", f"{base}-b") == (204, None)
            assert await updates.next() == ([f"{base}-b"], [])
            assert _admin(broker, "PUT", f"{base}-p", "/partitions", 2) == (204, None)
            assert await updates.next() == ([f"{base}-p-partition-0", f"{base}-p-partition-1"], [])
            assert _admin(broker, "DELETE", f"{base}-a") == (204, None)
            assert await updates.next() == ([], [f"{base}-a"])
            assert updates.got == []

            with pytest.raises(PulsarException):
                await _watch(cnx, 8, "persistent://public/default/(")

            request_id = cnx.new_request_id()
            closed = await cnx.request(
                pb.CommandWatchTopicListClose(request_id=request_id, watcher_id=7), request_id
            )
            assert closed.command.type == pb.BaseCommand.SUCCESS
            # A second watcher of the same pattern is the barrier: one refresh
            # tells every watcher of the namespace, so watcher 7's update, if
            # it were still sent, would come no later than watcher 9's.
            witness = Updates()
            cnx.register_watcher(9, witness)
            await _watch(cnx, 9, f"{base}-.*")
            assert _admin(broker, "PUT", f"{base}-c") == (204, None)
            assert await witness.next() == ([f"{base}-c"], [])
            assert updates.got == [] and not updates.changed.is_set()
        finally:
            await cnx.close()

    asyncio.run(scenario())


def test_pattern_consumer_follows_the_watcher(broker: BrokerThread) -> None:
    """SEM-1: with a discovery period of an hour, our client's pattern consumer
    still receives from a topic created after it subscribed, because the
    broker's watcher tells it at once."""
    tag = f"pw{uuid.uuid4().hex[:6]}"
    first = f"persistent://public/default/{tag}-a"
    later = f"persistent://public/default/{tag}-b"
    client = magnetar_client.Client(broker.url, operation_timeout_seconds=10)
    try:
        client.create_producer(first).send(b"first")
        consumer = client.subscribe(
            re.compile(f"persistent://public/default/{tag}-.*"),
            "rx",
            initial_position=magnetar_client.InitialPosition.Earliest,
            pattern_auto_discovery_period=3600,
        )
        msg = consumer.receive(timeout_millis=10_000)
        assert (msg.topic_name(), msg.data()) == (first, b"first")
        consumer.acknowledge(msg)
        # The topic is created by this producer; the consumer joins it from
        # the earliest position once the watcher has told it.
        client.create_producer(later).send(b"later")
        got = consumer.receive(timeout_millis=10_000)
        assert (got.topic_name(), got.data()) == (later, b"later")
    finally:
        client.close()
