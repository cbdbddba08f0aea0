"""Topic compaction with the official client (issue 16): the compacted view
keeps the latest message per key up to the horizon, tombstones remove keys,
batches are compacted message by message; read_compacted readers, table
views and plain readers each see what they should; the view survives a
restart."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pulsar

from magnetar.broker.compaction.state import CompactionRunning
from magnetar.broker.topics.persistent import PersistentTopic
from magnetar.proto import pulsar_api_pb2 as pb
from tests.support.brokers import BrokerThread
from tests.support.http_calls import http_call
from tests.support.official import official_client
from tests.support.raw_client import RawClient

MESSAGES, KEYS = 10_000, 100


def _topic() -> str:
    return f"persistent://public/default/compact-{uuid.uuid4().hex[:8]}"


def _admin(broker: BrokerThread | Any, topic: str) -> str:
    return f"{broker.http_url}/admin/v2/{topic.replace('://', '/')}/compaction"


def compact_and_wait(broker: BrokerThread | Any, topic: str) -> dict[str, Any]:
    url = _admin(broker, topic)
    assert http_call("PUT", url)[0] == 204
    while True:
        status, body = http_call("GET", url)
        assert status == 200
        if body["status"] != "RUNNING":
            return dict(body)
        time.sleep(0.05)


def publish_with_deletes(client: Any, topic: str) -> dict[str, bytes]:
    """MESSAGES messages over KEYS keys, batched; every 7th key's last message
    is a tombstone. Returns the expected latest value of each live key."""
    producer = client.create_producer(
        topic,
        batching_enabled=True,
        batching_max_messages=50,
        batching_max_publish_delay_ms=5,
        block_if_queue_full=True,
    )
    failures: list[object] = []
    latest: dict[str, bytes | None] = {}
    for i in range(MESSAGES):
        key = f"k{i % KEYS}"
        last_round = i >= MESSAGES - KEYS
        value: bytes | None = f"v{i}".encode()
        if last_round and (i % KEYS) % 7 == 0:
            value = None
        producer.send_async(
            value,
            lambda res, _id: failures.append(res) if res != pulsar.Result.Ok else None,
            partition_key=key,
        )
        latest[key] = value
    producer.flush()
    producer.close()
    assert not failures
    return {k: v for k, v in latest.items() if v is not None}


def read_all(client: Any, topic: str, *, compacted: bool) -> list[tuple[str, bytes]]:
    reader = client.create_reader(
        topic, pulsar.MessageId.earliest, is_read_compacted=compacted, receiver_queue_size=1000
    )
    got = []
    while reader.has_message_available():
        msg = reader.read_next(timeout_millis=10000)
        got.append((msg.partition_key(), msg.data()))
    reader.close()
    return got


def test_compacted_view_of_10k_messages_with_deletes(broker: BrokerThread) -> None:
    """10,000 messages over 100 keys with deletes: a read_compacted reader
    sees exactly the latest value of each live key, a plain reader still
    sees everything, a table view matches, and a status of SUCCESS."""
    topic = _topic()
    with official_client(broker.url) as client:
        assert http_call("GET", _admin(broker, topic))[0] == 404  # no such topic yet
        expected = publish_with_deletes(client, topic)
        assert http_call("GET", _admin(broker, topic)) == (
            200,
            {"status": "NOT_RUN", "lastError": ""},
        )
        assert compact_and_wait(broker, topic) == {"status": "SUCCESS", "lastError": ""}
        compacted = read_all(client, topic, compacted=True)
        assert sorted(compacted) == sorted(expected.items())
        assert len(read_all(client, topic, compacted=False)) == MESSAGES
        table = client.create_table_view(topic)
        snapshot: dict[str, bytes] = {}
        table.for_each(lambda key, value: snapshot.__setitem__(key, value))
        assert snapshot == expected
        table.close()


def test_read_compacted_continues_on_the_raw_topic_after_the_horizon(
    broker: BrokerThread,
) -> None:
    """Past the horizon a read_compacted consumer reads every message, and a
    later run takes the new messages in (building on the previous view)."""
    topic = _topic()
    with official_client(broker.url) as client:
        producer = client.create_producer(topic, batching_enabled=False)
        for value, key in ((b"a1", "a"), (b"b1", "b"), (b"a2", "a")):
            producer.send(value, partition_key=key)
        compact_and_wait(broker, topic)
        for value, key in ((b"a3", "a"), (b"a4", "a"), (b"", "b")):
            producer.send(value, partition_key=key)
        assert read_all(client, topic, compacted=True) == [
            ("b", b"b1"),
            ("a", b"a2"),
            ("a", b"a3"),
            ("a", b"a4"),
            ("b", b""),
        ]
        compact_and_wait(broker, topic)
        assert read_all(client, topic, compacted=True) == [("a", b"a4")]


def test_read_compacted_only_on_exclusive_and_failover(broker: BrokerThread) -> None:
    """A Shared or Key_Shared read_compacted SUBSCRIBE is refused with
    NotAllowed and a clear message (the official client refuses it before
    asking); Exclusive and Failover are accepted."""
    topic = _topic()
    Sub = pb.CommandSubscribe
    with RawClient.for_broker(broker) as raw:
        raw.connect()
        for consumer_id, sub_type in enumerate((Sub.Shared, Sub.Key_Shared)):
            raw.send(
                Sub(
                    topic=topic,
                    subscription=f"s{consumer_id}",
                    subType=sub_type,
                    consumer_id=consumer_id,
                    request_id=raw.request_id(),
                    read_compacted=True,
                )
            )
            error = raw.expect(pb.BaseCommand.ERROR).command.error
            assert error.error == pb.NotAllowedError
            assert "Exclusive and Failover" in error.message
    with official_client(broker.url) as client:
        client.subscribe(
            topic, "fo", consumer_type=pulsar.ConsumerType.Failover, is_read_compacted=True
        ).close()
        client.subscribe(topic, "ex", is_read_compacted=True).close()


def test_a_second_run_while_one_runs_is_refused(broker: BrokerThread) -> None:
    """PUT compaction while a run is under way: 409 (CompactionRunning)."""
    topic = _topic()
    with official_client(broker.url) as client:
        client.create_producer(topic).send(b"x", partition_key="k")

    async def trigger_twice() -> str:
        assert broker.server is not None and broker.server.service is not None
        loaded = await broker.server.service.get_topic(topic, create=False)
        assert isinstance(loaded, PersistentTopic)
        first = loaded.compaction.trigger()
        try:
            loaded.compaction.trigger()
        except CompactionRunning as exc:
            refused = exc.message
        else:
            refused = ""
        await asyncio.wait_for(first, 30)
        return refused

    assert "already running" in broker.call(trigger_twice())


def test_compacted_view_survives_a_restart(broker: BrokerThread) -> None:
    topic = _topic()
    with official_client(broker.url) as client:
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(20):
            producer.send(f"v{i}".encode(), partition_key=f"k{i % 3}")
        compact_and_wait(broker, topic)
    broker.restart()
    with official_client(broker.url) as client:
        assert sorted(read_all(client, topic, compacted=True)) == [
            ("k0", b"v18"),
            ("k1", b"v19"),
            ("k2", b"v17"),
        ]


def test_threshold_policy_starts_compaction_by_itself(broker: BrokerThread) -> None:
    """compactionThreshold (bytes, per namespace; the topic policy wins): once
    that much is published, a run starts without an admin call."""
    ns = f"ct-{uuid.uuid4().hex[:6]}"
    base = f"{broker.http_url}/admin/v2/namespaces/public/{ns}"
    assert http_call("PUT", base)[0] == 204
    assert http_call("POST", f"{base}/compactionThreshold", 2000)[0] == 204
    assert http_call("GET", f"{base}/compactionThreshold") == (200, 2000)
    assert (
        http_call("POST", f"{base}/compactionThreshold", -1)[0] == 412
    )  # Pulsar: PRECONDITION_FAILED
    topic = f"persistent://public/{ns}/auto"
    url = f"{broker.http_url}/admin/v2/persistent/public/{ns}/auto/compaction"
    with official_client(broker.url) as client:
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(b"x" * 100, partition_key="k")
        assert http_call("GET", url)[1]["status"] == "NOT_RUN"
        for i in range(30):
            producer.send(b"%d" % i + b"x" * 100, partition_key=f"k{i % 3}")
        while (status := http_call("GET", url)[1]["status"]) in ("NOT_RUN", "RUNNING"):
            time.sleep(0.05)
        assert status == "SUCCESS"


def test_status_and_threshold_count_survive_a_restart(broker: BrokerThread) -> None:
    """Issue 28.4: the last run's status and the bytes published toward the
    compactionThreshold policy are kept across a restart: a SUCCESS stays
    SUCCESS, and a threshold half reached before the restart is reached by
    the other half after it."""
    ns = f"cr-{uuid.uuid4().hex[:6]}"
    base = f"{broker.http_url}/admin/v2/namespaces/public/{ns}"
    assert http_call("PUT", base)[0] == 204
    done = f"persistent://public/{ns}/done"
    with official_client(broker.url) as client:
        client.create_producer(done).send(b"v", partition_key="k")
    assert compact_and_wait(broker, done)["status"] == "SUCCESS"
    assert http_call("POST", f"{base}/compactionThreshold", 4000)[0] == 204
    auto = f"persistent://public/{ns}/auto"
    payload = b"x" * 200
    with official_client(broker.url) as client:
        producer = client.create_producer(auto, batching_enabled=False)
        for i in range(12):  # well over half of the threshold, not all of it
            producer.send(payload, partition_key=f"k{i % 3}")
    assert http_call("GET", _admin(broker, auto))[1]["status"] == "NOT_RUN"
    broker.restart()  # the HTTP port changes: _admin reads it again
    assert http_call("GET", _admin(broker, done))[1] == {"status": "SUCCESS", "lastError": ""}
    with official_client(broker.url) as client:
        producer = client.create_producer(auto, batching_enabled=False)
        for i in range(10):  # alone, this is short of the threshold
            producer.send(payload, partition_key=f"k{i % 3}")
        deadline = time.monotonic() + 10
        while (status := http_call("GET", _admin(broker, auto))[1]["status"]) in (
            "NOT_RUN",
            "RUNNING",
        ):
            assert time.monotonic() < deadline, "the threshold count started again at 0"
            time.sleep(0.05)
    assert status == "SUCCESS"
