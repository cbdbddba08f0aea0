"""Readers (issue 12, SEMANTICS 5): the same scenarios through the official
client (`import pulsar`) and through ours, against pulsar-lite and our broker:
start at earliest, latest, a message id exclusive and inclusive;
has_message_available at every step; seek back to an id."""

from __future__ import annotations

from typing import Any

import pulsar
import pytest

import magnetar.client as magnetar_client
from tests.interop.conftest import BrokerUnderTest

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
