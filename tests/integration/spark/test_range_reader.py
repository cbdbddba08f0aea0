"""A task's range reader (range_reader.py) on its own, against the broker:
what Spark's Python worker is handed for one partition range (SEM-5.6)."""

from __future__ import annotations

import uuid
from typing import Any

import pulsar
import pytest

from magnetar.spark_connector.offsets import BEFORE_FIRST
from magnetar.spark_connector.range_reader import ARROW_SCHEMA, PartitionRange, read_range
from magnetar.spark_connector.read_options import ReadOptions
from tests.support.brokers import BrokerThread
from tests.support.official import official_client


def _write(broker: BrokerThread, topic: str, count: int, *, with_properties: bool) -> list[Any]:
    """`count` unbatched messages "00000", "00001", ...; their ids."""
    with official_client(broker.url) as client:
        producer = client.create_producer(topic, batching_enabled=False)
        return [
            producer.send(b"%05d" % i, properties=_properties(i) if with_properties else {})
            for i in range(count)
        ]


def _properties(i: int) -> dict[str, str]:
    return {"i": str(i)} if i % 3 == 0 else {}


def _position(msg_id: Any) -> list[int]:
    return [msg_id.ledger_id(), msg_id.entry_id(), -1]


def _read(broker: BrokerThread, topic: str, start: list[int], end: list[int]) -> list[Any]:
    options = ReadOptions.parse({"service_url": broker.url, "topic": topic})
    batches = list(read_range(options, PartitionRange(topic, start, end)))
    for batch in batches:
        assert batch.schema.equals(ARROW_SCHEMA)
        batch.validate(full=True)
    return [row for batch in batches for row in batch.to_pylist()]


@pytest.mark.parametrize("with_properties", [False, True])
def test_a_range_holds_every_message_in_it_once_with_its_columns(
    broker: BrokerThread, with_properties: bool
) -> None:
    """SEM-5.6: a range read from a position holds the messages after it up
    to and including its end, once each, in order, with their ids and
    properties (an empty map for a message without; a range where no
    message has any takes a shorter path)."""
    topic = f"persistent://public/default/range-{uuid.uuid4().hex[:8]}"
    ids = _write(broker, topic, 300, with_properties=with_properties)

    rows = _read(broker, topic, BEFORE_FIRST, _position(ids[-1]))
    assert [row["value"] for row in rows] == [b"%05d" % i for i in range(300)]
    assert [pulsar.MessageId.deserialize(row["message_id"]) for row in rows] == ids
    expected = [_properties(i) if with_properties else {} for i in range(300)]
    assert [dict(row["properties"]) for row in rows] == expected
    assert {row["topic"] for row in rows} == {topic}

    middle = _read(broker, topic, _position(ids[99]), _position(ids[199]))
    assert [row["value"] for row in middle] == [b"%05d" % i for i in range(100, 200)]
