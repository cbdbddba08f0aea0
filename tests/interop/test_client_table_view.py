"""Our blocking client's TableView: the topic's latest value per key, as
Pulsar's TableView keeps it (no SEMANTICS rule; Pulsar's documented
behaviour: an empty or null value removes its key)."""

from __future__ import annotations

import threading

import pytest

from magnetar import client as magnetar
from tests.interop.conftest import BrokerUnderTest
from tests.support.polling import eventually

pytestmark = pytest.mark.lite


def test_a_view_holds_what_the_topic_held_when_it_was_created(
    ours: magnetar.Client, broker: BrokerUnderTest
) -> None:
    """create_table_view returns once every stored message is applied: the
    last value per key, a key whose last value is empty or null gone, keyless
    messages ignored."""
    topic = broker.topic("tv-catchup")
    producer = ours.create_producer(topic)
    producer.send(b"a1", partition_key="a")
    producer.send(b"b1", partition_key="b")
    producer.send(b"a2", partition_key="a")
    producer.send(b"c1", partition_key="c")
    producer.send(b"", partition_key="b")
    producer.send(None, partition_key="c")
    producer.send(b"no key")
    view = ours.create_table_view(topic)
    assert len(view) == 1
    assert view.get("a") == b"a2"
    assert view.get("b") is None and view.get("c") is None
    view.close()


def test_a_view_follows_the_topic_and_tells_its_listeners(
    ours: magnetar.Client, broker: BrokerUnderTest
) -> None:
    """for_each_and_listen: every entry first (done when it returns), then each
    update in order, removals with an empty value, on a thread of its own (a
    listener may call the blocking client)."""
    topic = broker.topic("tv-follow")
    producer = ours.create_producer(topic)
    producer.send(b"v0", partition_key="k0")
    view = ours.create_table_view(topic)
    seen: list[tuple[str, bytes]] = []
    threads: set[str] = set()

    def listener(key: str, value: bytes) -> None:
        threads.add(threading.current_thread().name)
        seen.append((key, value))

    view.for_each_and_listen(listener)
    assert seen == [("k0", b"v0")]
    producer.send(b"v1", partition_key="k1")
    producer.send(b"v0'", partition_key="k0")
    producer.send(b"", partition_key="k1")
    eventually("four listener calls", lambda: len(seen) == 4, timeout=10)
    assert seen[1:] == [("k1", b"v1"), ("k0", b"v0'"), ("k1", b"")]
    assert all(name.startswith("magnetar-table-view") for name in threads)
    assert view.get("k0") == b"v0'" and view.get("k1") is None
    copy: dict[str, bytes] = {}
    view.for_each(copy.__setitem__)
    assert copy == {"k0": b"v0'"}
    view.close()
    view.close()  # idempotent


def test_a_view_decodes_with_its_schema_and_reads_every_partition(
    ours: magnetar.Client, broker: BrokerUnderTest
) -> None:
    """A StringSchema view of a partitioned topic: keys from every partition,
    values decoded. (Every partition gets some of the 20 keys: pulsar-lite
    answers GET_LAST_MESSAGE_ID on an empty topic with an error.)"""
    url, topic = broker.partitioned_topic("tv-parts")
    client = magnetar.Client(url, operation_timeout_seconds=10)
    try:
        producer = client.create_producer(topic, schema=magnetar.schema.StringSchema())
        for i in range(20):
            producer.send(f"value-{i}", partition_key=f"key-{i}")
        view = client.create_table_view(topic, schema=magnetar.schema.StringSchema())
        assert len(view) == 20
        assert view.get("key-5") == "value-5"
        assert str(view) == f"TableView(topic={topic})"
        view.close()
    finally:
        client.close()
