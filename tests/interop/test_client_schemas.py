"""Schemas through our client (issue 26, item 2), with the official client
on the other side of the same topic on our broker: the producer registers
its schema in PRODUCER, the consumer declares it in SUBSCRIBE, so the
broker's registry and compatibility check apply to both clients alike."""

from __future__ import annotations

import itertools

import pulsar
import pulsar.schema as official_schema
import pytest

import magnetar.client as ours
import magnetar.client.schema as our_schema
from tests.support.brokers import BrokerThread

_names = itertools.count()


def _topic(kind: str) -> str:
    return f"persistent://public/default/schema-{kind}-{next(_names)}"


class OurPoint(our_schema.Record):
    x = our_schema.Integer()
    label = our_schema.String()


class OfficialPoint(official_schema.Record):  # type: ignore[misc]
    x = official_schema.Integer()
    label = official_schema.String()


@pytest.mark.parametrize("kind", ["json", "avro"])
def test_records_cross_between_the_clients(magnetar_broker: BrokerThread, kind: str) -> None:
    """A record our client produces decodes in the official client and the
    other way round; both register the same definition, so neither is
    refused (JsonSchema / AvroSchema, SEMANTICS schema registry)."""
    topic = _topic(kind)
    our_kind = our_schema.JsonSchema if kind == "json" else our_schema.AvroSchema
    official_kind = official_schema.JsonSchema if kind == "json" else official_schema.AvroSchema
    mine = ours.Client(magnetar_broker.url)
    theirs = pulsar.Client(
        magnetar_broker.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
    )
    try:
        our_consumer = mine.subscribe(topic, "ours", schema=our_kind(OurPoint))
        official_consumer = theirs.subscribe(topic, "theirs", schema=official_kind(OfficialPoint))
        mine.create_producer(topic, schema=our_kind(OurPoint)).send(OurPoint(x=1, label="ours"))
        theirs.create_producer(topic, schema=official_kind(OfficialPoint)).send(
            OfficialPoint(x=2, label="theirs")
        )
        got_ours = [our_consumer.receive(timeout_millis=5000).value() for _ in range(2)]
        got_theirs = [official_consumer.receive(timeout_millis=5000).value() for _ in range(2)]
        assert [(p.x, p.label) for p in got_ours] == [(1, "ours"), (2, "theirs")]
        assert [(p.x, p.label) for p in got_theirs] == [(1, "ours"), (2, "theirs")]
        assert all(isinstance(p, OurPoint) for p in got_ours)
    finally:
        mine.close()
        theirs.close()


def test_an_incompatible_schema_is_refused(magnetar_broker: BrokerThread) -> None:
    """Once a topic has a JSON schema, our producer with a string schema is
    refused with IncompatibleSchema, as the official client is."""
    topic = _topic("incompatible")
    client = ours.Client(magnetar_broker.url, operation_timeout_seconds=5)
    try:
        client.create_producer(topic, schema=our_schema.JsonSchema(OurPoint))
        with pytest.raises(ours.IncompatibleSchema):
            client.create_producer(topic, schema=our_schema.StringSchema())
        strings = _topic("strings")
        producer = client.create_producer(strings, schema=our_schema.StringSchema())
        consumer = client.subscribe(strings, "s", schema=our_schema.StringSchema())
        producer.send("hello")
        assert consumer.receive(timeout_millis=5000).value() == "hello"
    finally:
        client.close()


class OfficialPointSorted(official_schema.Record):  # type: ignore[misc]
    """OfficialPoint's fields in another order: a second version of the
    schema whose binary Avro layout differs (label first)."""

    _sorted_fields = True
    x = official_schema.Integer()
    label = official_schema.String()


def test_avro_decodes_with_the_writers_schema_version(magnetar_broker: BrokerThread) -> None:
    """Our Avro consumer reads each message with the schema version it was
    written with (fetched from the broker's registry by GET_SCHEMA) and
    resolves it to its own record; schema_version() is a str as the official
    client gives it, int_schema_version() the number."""
    topic = _topic("evolve")
    mine = ours.Client(magnetar_broker.url)
    theirs = pulsar.Client(
        magnetar_broker.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
    )
    try:
        consumer = mine.subscribe(topic, "ours", schema=our_schema.AvroSchema(OurPoint))
        theirs.create_producer(topic, schema=official_schema.AvroSchema(OfficialPoint)).send(
            OfficialPoint(x=1, label="first")
        )
        theirs.create_producer(topic, schema=official_schema.AvroSchema(OfficialPointSorted)).send(
            OfficialPointSorted(x=2, label="second")
        )
        got = [consumer.receive(timeout_millis=5000) for _ in range(2)]
        assert [(m.value().x, m.value().label) for m in got] == [(1, "first"), (2, "second")]
        # (Our consumer's subscription registered its own definition first.)
        first, second = (m.int_schema_version() for m in got)
        assert 0 <= first < second
        assert got[1].schema_version().encode() == second.to_bytes(8, "big")
        written = [mine.get_schema_info(topic, v).schema() for v in (first, second)]
        assert written[0] != written[1] and written[1] == mine.get_schema_info(topic).schema()
    finally:
        mine.close()
        theirs.close()
