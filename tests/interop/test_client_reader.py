"""Readers (issue 12, SEMANTICS 5): the same scenarios through the official
client (`import pulsar`) and through ours, against pulsar-lite and our broker:
start at earliest, latest, a message id exclusive and inclusive;
has_message_available at every step; seek back to an id."""

from __future__ import annotations

from typing import Any

import pulsar
import pytest

import magnetar.client as magnetar_client
from tests.interop.conftest import PARTITIONS, BrokerUnderTest

COUNT = 10


@pytest.fixture(params=["official", "magnetar"])
def api(request: pytest.FixtureRequest) -> Any:
    return pulsar if request.param == "official" else magnetar_client


def _client(api: Any, url: str) -> Any:
    return api.Client(url, operation_timeout_seconds=10)


def _fill(client: Any, topic: str) -> list[Any]:
    producer = client.create_producer(topic, batching_enabled=False)
    return [producer.send(b"m%d" % i) for i in range(COUNT)]


def _drain(reader: Any) -> list[bytes]:
    out = []
    while reader.has_message_available():
        out.append(reader.read_next(timeout_millis=5000).data())
    return out


def test_reader_start_positions(broker: BrokerUnderTest, api: Any) -> None:
    """SEM-5: earliest reads everything; latest nothing until new messages;
    an id exclusive starts after it, inclusive at it."""
    topic = broker.topic("reader")
    client = _client(api, broker.url)
    try:
        ids = _fill(client, topic)
        expected = [b"m%d" % i for i in range(COUNT)]
        assert _drain(client.create_reader(topic, api.MessageId.earliest)) == expected
        latest = client.create_reader(topic, api.MessageId.latest)
        assert not latest.has_message_available()
        start = ids[4]
        assert _drain(client.create_reader(topic, start)) == expected[5:]
        inclusive = client.create_reader(topic, start, start_message_id_inclusive=True)
        assert _drain(inclusive) == expected[4:]
        client.create_producer(topic).send(b"new")
        if "reader_latest_available" not in broker.lacks:
            assert latest.has_message_available()
        assert latest.read_next(timeout_millis=5000).data() == b"new"
        assert not latest.has_message_available()
        with pytest.raises(api.Timeout):
            latest.read_next(timeout_millis=200)
    finally:
        client.close()


def test_reader_seek_back_to_an_id(broker: BrokerUnderTest, api: Any) -> None:
    broker.require("seek")
    topic = broker.topic("reader-seek")
    client = _client(api, broker.url)
    try:
        ids = _fill(client, topic)
        reader = client.create_reader(topic, api.MessageId.earliest)
        assert len(_drain(reader)) == COUNT
        reader.seek(ids[6])  # exclusive, as the reader was made
        assert reader.read_next(timeout_millis=5000).data() == b"m7"
        assert _drain(reader) == [b"m8", b"m9"]
        reader.close()
    finally:
        client.close()


def test_partitioned_reader_reads_every_partition(broker: BrokerUnderTest, api: Any) -> None:
    """SEMANTICS 5 readers, partitioned: from earliest every partition is read,
    each message with its partition's topic; has_message_available goes false
    when all is read and true again after a send; from latest nothing old."""
    url, topic = broker.partitioned_topic("preader")
    client = _client(api, url)
    try:
        producer = client.create_producer(
            topic,
            batching_enabled=False,
            message_routing_mode=api.PartitionsRoutingMode.RoundRobinDistribution,
        )
        for i in range(8):
            producer.send(b"p%d" % i)
        reader = client.create_reader(topic, api.MessageId.earliest)
        latest = client.create_reader(topic, api.MessageId.latest)
        got = [reader.read_next(timeout_millis=10_000) for _ in range(8)]
        assert sorted(m.data() for m in got) == sorted(b"p%d" % i for i in range(8))
        assert len({m.topic_name() for m in got}) == PARTITIONS
        assert not reader.has_message_available()
        assert not latest.has_message_available()
        producer.send(b"late")
        assert reader.has_message_available()
        assert reader.read_next(timeout_millis=10_000).data() == b"late"
        assert latest.read_next(timeout_millis=10_000).data() == b"late"
        reader.close()
        latest.close()
    finally:
        client.close()


def test_partitioned_reader_seek_by_time(broker: BrokerUnderTest, api: Any) -> None:
    """SEMANTICS 5 readers, partitioned (WIRE 12): a seek to a publish time
    rewinds every partition; what is read again is exactly what was published
    at or after it."""
    broker.require("seek")
    url, topic = broker.partitioned_topic("pseek")
    client = _client(api, url)
    try:
        producer = client.create_producer(
            topic,
            batching_enabled=False,
            message_routing_mode=api.PartitionsRoutingMode.RoundRobinDistribution,
        )
        for i in range(8):
            producer.send(b"s%d" % i)
        reader = client.create_reader(topic, api.MessageId.earliest)
        got = [reader.read_next(timeout_millis=10_000) for _ in range(8)]
        when = sorted(m.publish_timestamp() for m in got)[4]
        expected = sorted(m.data() for m in got if m.publish_timestamp() >= when)
        reader.seek(when)
        again = [reader.read_next(timeout_millis=10_000).data() for _ in expected]
        assert sorted(again) == expected
        with pytest.raises(api.Timeout):
            reader.read_next(timeout_millis=300)
        reader.close()
    finally:
        client.close()
