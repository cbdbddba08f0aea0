"""Our client and the official `pulsar-client` on the same topics, both directions.

Payloads must arrive byte-equal and the metadata an application sees
(properties, keys, event time, producer name) equal, for batched, compressed
(every codec), chunked and keyed traffic. Our side uses the blocking facade,
which takes the official client's calls unchanged.

Consumers subscribe (from Earliest) after the messages are stored: pulsar-lite
0.2 sometimes dispatches one entry many times to a consumer that is tailing
the topic while it is written (reproduced with the official client on both
ends), which would make these comparisons flaky for a reason not ours.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from typing import Any

import pulsar
import pytest

from magnetar import client as magnetar
from magnetar.proto.hashes import partition_for_key
from tests.interop.conftest import PARTITIONS, BrokerUnderTest
from tests.support.official import official_client

pytestmark = [pytest.mark.lite, pytest.mark.official]

CODECS = ["NONE", "LZ4", "ZLib", "ZSTD", "SNAPPY"]


@pytest.fixture
def official(broker: BrokerUnderTest) -> Iterator[Any]:
    with official_client(broker.url) as client:
        yield client


def _messages(count: int, keyed: bool) -> list[dict[str, Any]]:
    out = []
    for i in range(count):
        msg: dict[str, Any] = {
            "content": os.urandom(16) + b"payload-%d" % i * 20,
            "properties": {"index": str(i), "kind": "cross"},
            "event_timestamp": 1_700_000_000_000 + i,
        }
        if keyed:
            msg["partition_key"] = f"key-{i % 3}"
            msg["ordering_key"] = f"order-{i % 2}"
        out.append(msg)
    return out


def _publish(producer: Any, messages: list[dict[str, Any]]) -> None:
    errors: list[object] = []
    done = threading.Event()
    remaining = [len(messages)]
    lock = threading.Lock()

    def callback(result: Any, msg_id: Any) -> None:
        with lock:
            if int(result) != 0:
                errors.append(result)
            remaining[0] -= 1
            if remaining[0] == 0:
                done.set()

    for msg in messages:
        producer.send_async(callback=callback, **msg)
    producer.flush()
    assert done.wait(10), "not every send was answered"
    assert not errors


def _seen(msg: Any) -> dict[str, Any]:
    """What an application sees of a message, through the (shared) official API."""
    return {
        "content": msg.data(),
        "properties": msg.properties(),
        "partition_key": msg.partition_key() or None,
        "ordering_key": msg.ordering_key() or None,
        "event_timestamp": msg.event_timestamp(),
    }


def _expected(msg: dict[str, Any]) -> dict[str, Any]:
    return {
        "content": msg["content"],
        "properties": msg["properties"],
        "partition_key": msg.get("partition_key"),
        "ordering_key": msg.get("ordering_key"),
        "event_timestamp": msg["event_timestamp"],
    }


def _receive_all(consumer: Any, count: int) -> list[Any]:
    received = []
    for _ in range(count):
        msg = consumer.receive(10_000)
        consumer.acknowledge(msg)
        received.append(msg)
    return received


SCENARIOS = [
    pytest.param({"batching_enabled": True}, False, id="batched"),
    pytest.param({"batching_enabled": False}, True, id="single-keyed"),
    pytest.param(
        {"batching_enabled": True, "batching_type": "KeyBased"}, True, id="key-based-batches"
    ),
    *[
        pytest.param(
            {"batching_enabled": batched, "compression_type": codec},
            False,
            id=f"{codec}-{'batched' if batched else 'single'}",
        )
        for codec in CODECS
        for batched in (True, False)
    ],
]


def _options(module: Any, raw: dict[str, Any]) -> dict[str, Any]:
    options = dict(raw)
    if "compression_type" in options:
        options["compression_type"] = getattr(module.CompressionType, options["compression_type"])
    if "batching_type" in options:
        options["batching_type"] = getattr(module.BatchingType, options["batching_type"])
    options["batching_max_publish_delay_ms"] = 5
    return options


@pytest.mark.parametrize(("options", "keyed"), SCENARIOS)
def test_our_producer_to_official_consumer(
    broker: BrokerUnderTest, ours: Any, official: Any, options: dict[str, Any], keyed: bool
) -> None:
    topic = broker.topic("ours-to-official")
    producer = ours.create_producer(topic, producer_name="ours", **_options(magnetar, options))
    messages = _messages(12, keyed)
    _publish(producer, messages)
    consumer = official.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    received = _receive_all(consumer, len(messages))
    assert sorted((_seen(m) for m in received), key=repr) == sorted(
        (_expected(m) for m in messages), key=repr
    )
    assert {m.producer_name() for m in received} == {"ours"}
    if not keyed:  # one producer, one partition: order is kept too
        assert [m.data() for m in received] == [m["content"] for m in messages]


@pytest.mark.parametrize(("options", "keyed"), SCENARIOS)
def test_official_producer_to_our_consumer(
    broker: BrokerUnderTest, ours: Any, official: Any, options: dict[str, Any], keyed: bool
) -> None:
    topic = broker.topic("official-to-ours")
    producer = official.create_producer(
        topic, producer_name="official", **_options(pulsar, options)
    )
    messages = _messages(12, keyed)
    _publish(producer, messages)
    consumer = ours.subscribe(topic, "s", initial_position=magnetar.InitialPosition.Earliest)
    received = _receive_all(consumer, len(messages))
    assert sorted((_seen(m) for m in received), key=repr) == sorted(
        (_expected(m) for m in messages), key=repr
    )
    assert {m.producer_name() for m in received} == {"official"}
    if not keyed:
        assert [m.data() for m in received] == [m["content"] for m in messages]


def test_our_chunks_reassembled_by_the_official_consumer(
    broker: BrokerUnderTest, ours: Any, official: Any
) -> None:
    """SEM-8.2: our chunks (uuid, chunk_id, num_chunks, total size) read by the official client."""
    topic = broker.topic("chunks-ours")
    producer = ours.create_producer(
        topic, chunking_enabled=True, chunk_max_message_size=20_000,
        compression_type=magnetar.CompressionType.ZSTD,
    )  # fmt: skip
    big = os.urandom(90_000)
    producer.send(big, properties={"chunked": "yes"}, partition_key="big")
    producer.send(b"small")
    consumer = official.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    msg = consumer.receive(10_000)
    assert msg.data() == big
    assert msg.properties() == {"chunked": "yes"}
    assert msg.partition_key() == "big"
    consumer.acknowledge(msg)
    assert consumer.receive(10_000).data() == b"small"


def test_official_chunks_reassembled_by_our_consumer(
    broker: BrokerUnderTest, ours: Any, official: Any
) -> None:
    """SEM-8.2: the official client chunks messages over the 5 MiB default; we reassemble."""
    topic = broker.topic("chunks-official")
    producer = official.create_producer(topic, chunking_enabled=True)
    big = os.urandom(6 * 1024 * 1024)
    producer.send(big, properties={"chunked": "yes"})
    producer.send(b"small")
    consumer = ours.subscribe(topic, "s", initial_position=magnetar.InitialPosition.Earliest)
    msg = consumer.receive(10_000)
    assert msg.data() == big
    assert msg.properties() == {"chunked": "yes"}
    consumer.acknowledge(msg)
    assert consumer.receive(10_000).data() == b"small"


def test_same_key_same_partition_for_both_clients(broker: BrokerUnderTest) -> None:
    """1,000 keys: each lands on the same partition whichever client sends it."""
    url, topic = broker.partitioned_topic("keys")
    keys = [f"key-{i}-{'é' * (i % 3)}" for i in range(1000)]

    def partitions_by_key(client: Any) -> dict[str, int]:
        producer = client.create_producer(topic, batching_enabled=True)
        placed: dict[str, int] = {}
        lock = threading.Lock()
        done = threading.Event()

        def record(key: str) -> Any:
            def callback(result: Any, msg_id: Any) -> None:
                assert int(result) == 0
                with lock:
                    placed[key] = msg_id.partition()
                    if len(placed) == len(keys):
                        done.set()

            return callback

        for key in keys:
            producer.send_async(key.encode(), record(key), partition_key=key)
        producer.flush()
        assert done.wait(10)
        producer.close()
        return placed

    with official_client(url) as client:
        official_placement = partitions_by_key(client)
    ours_client = magnetar.Client(url)
    try:
        our_placement = partitions_by_key(ours_client)
    finally:
        ours_client.close()
    assert our_placement == official_placement
    assert len(set(our_placement.values())) == PARTITIONS
    assert all(partition_for_key(k, PARTITIONS) == p for k, p in our_placement.items())
