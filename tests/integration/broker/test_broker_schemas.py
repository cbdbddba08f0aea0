"""The schema registry with the official client (issue 16): String, JSON and
Avro produce / consume, versions from 0 (WIRE 6), evolution under the
namespace and topic strategies, GET_SCHEMA by version (WIRE 18), the admin
schema endpoints."""

from __future__ import annotations

import json
import uuid
from enum import Enum

import pulsar
import pytest
from pulsar.schema import (
    Array,
    AvroSchema,
    Boolean,
    Integer,
    JsonSchema,
    Long,
    Map,
    Record,
    String,
    StringSchema,
)

from magnetar.proto import pulsar_api_pb2 as pb
from tests.support.brokers import BrokerFactory, BrokerThread
from tests.support.http_calls import http_call
from tests.support.official import official_client
from tests.support.raw_client import RawClient

T = pb.BaseCommand
V0 = (0).to_bytes(8, "big")
V1 = (1).to_bytes(8, "big")


class Color(Enum):
    red = 0
    green = 1


class Item(Record):  # type: ignore[misc]  # the client ships no type hints
    name = String()
    count = Integer(default=7)
    color = Color
    tags = Array(String())
    attrs = Map(String())
    active = Boolean()


class User1(Record):  # type: ignore[misc]  # the client ships no type hints
    name = String()
    age = Integer()


class User2(Record):  # type: ignore[misc]  # the client ships no type hints
    name = String()
    age = Integer(required=True)


class User3(Record):  # type: ignore[misc]  # the client ships no type hints
    name = String()
    age = Long()


class Renamed(Record):  # type: ignore[misc]  # the client ships no type hints
    label = String(required=True)


def _topic() -> str:
    return f"persistent://public/default/schema-{uuid.uuid4().hex[:8]}"


def _namespace(broker: BrokerThread, strategy: str) -> str:
    ns = f"sc-{uuid.uuid4().hex[:6]}"
    base = f"{broker.http_url}/admin/v2/namespaces/public/{ns}"
    assert http_call("PUT", base)[0] == 204
    assert http_call("PUT", f"{base}/schemaCompatibilityStrategy", strategy)[0] == 204
    assert http_call("GET", f"{base}/schemaCompatibilityStrategy") == (200, strategy)
    return ns


@pytest.mark.parametrize("schema_kind", [AvroSchema, JsonSchema])
def test_records_enums_maps_arrays_and_defaults_round_trip(
    broker: BrokerThread, schema_kind: type
) -> None:
    """Avro and JSON records (an enum, an array, a map, a default) go through
    unchanged and every message carries version 0."""
    topic = _topic()
    with official_client(broker.url) as client:
        consumer = client.subscribe(topic, "s", schema=schema_kind(Item))
        producer = client.create_producer(topic, schema=schema_kind(Item))
        sent = Item(name="a", color=Color.green, tags=["x", "y"], attrs={"k": "v"}, active=True)
        producer.send(sent)
        msg = consumer.receive(timeout_millis=10000)
        assert msg.value() == sent
        assert msg.value().count == 7
        assert msg.schema_version().encode() == V0


def test_string_schema_and_bytes_producers_share_a_topic(broker: BrokerThread) -> None:
    """A producer without a schema (bytes) is accepted on a topic that has one."""
    topic = _topic()
    with official_client(broker.url) as client:
        consumer = client.subscribe(topic, "s", schema=StringSchema())
        client.create_producer(topic, schema=StringSchema()).send("hello")
        client.create_producer(topic).send(b"raw")
        assert consumer.receive(timeout_millis=10000).value() == "hello"
        assert consumer.receive(timeout_millis=10000).value() == "raw"


def test_schema_validation_enforced_refuses_bytes_producers(
    broker_factory: BrokerFactory,
) -> None:
    """Pulsar's isSchemaValidationEnforced: a producer without a schema is
    refused with IncompatibleSchema on a topic that has one, and still
    welcome on a topic that has none (the C++ suite's SchemaTest.testSchema)."""
    broker = broker_factory(is_schema_validation_enforced=True)
    typed, untyped = _topic(), _topic()
    with official_client(broker.url) as client:
        client.create_producer(typed, schema=StringSchema()).send("typed")
        with pytest.raises(pulsar.IncompatibleSchema):
            client.create_producer(typed)
        client.create_producer(untyped).send(b"raw")


def test_forward_evolution_becomes_version_1_and_get_schema_returns_it(
    broker: BrokerThread,
) -> None:
    """Under FORWARD a second compatible schema is version 1; GET_SCHEMA by
    version (8-byte big-endian) and the admin API return each version."""
    ns = _namespace(broker, "FORWARD")
    topic = f"persistent://public/{ns}/evolve"
    with official_client(broker.url) as client:
        consumer = client.subscribe(topic, "s", schema=AvroSchema(User1))
        p1 = client.create_producer(topic, schema=AvroSchema(User1))
        p2 = client.create_producer(topic, schema=AvroSchema(User2))
        p1.send(User1(name="one", age=1))
        p2.send(User2(name="two", age=2))
        first, second = (consumer.receive(timeout_millis=10000) for _ in range(2))
        assert (first.schema_version().encode(), second.schema_version().encode()) == (V0, V1)
        assert (first.value().age, second.value().age) == (1, 2)
    with RawClient.for_broker(broker) as raw:
        raw.connect()
        for version, record in ((V0, User1), (V1, User2)):
            raw.send(pb.CommandGetSchema(request_id=5, topic=topic, schema_version=version))
            answer = raw.expect(T.GET_SCHEMA_RESPONSE).command.getSchemaResponse
            assert not answer.HasField("error_code")
            assert answer.schema_version == version
            assert json.loads(answer.schema.schema_data) == record.schema()
        raw.send(pb.CommandGetSchema(request_id=6, topic=f"{topic}-partition-0"))
        latest = raw.expect(T.GET_SCHEMA_RESPONSE).command.getSchemaResponse
        assert latest.schema_version == V1
        raw.send(
            pb.CommandGetSchema(request_id=7, topic=topic, schema_version=(9).to_bytes(8, "big"))
        )
        missing = raw.expect(T.GET_SCHEMA_RESPONSE).command.getSchemaResponse
        assert missing.error_code == pb.TopicNotFound
    base = f"{broker.http_url}/admin/v2/schemas/public/{ns}/evolve"
    status, body = http_call("GET", f"{base}/schema/1")
    assert status == 200 and body["version"] == 1 and body["type"] == "AVRO"
    assert json.loads(body["data"]) == User2.schema()
    status, body = http_call("GET", f"{base}/schemas")
    assert [s["version"] for s in body["getSchemaResponses"]] == [0, 1]


def test_incompatible_schema_is_refused_under_backward(broker: BrokerThread) -> None:
    """BACKWARD: a schema that cannot read the existing data is refused with
    IncompatibleSchema (fatal: the client fails at once); a compatible one
    joins."""
    ns = _namespace(broker, "BACKWARD")
    topic = f"persistent://public/{ns}/strict"
    with official_client(broker.url) as client:
        client.create_producer(topic, schema=AvroSchema(User1))
        with pytest.raises(pulsar.IncompatibleSchema):
            client.create_producer(topic, schema=AvroSchema(Renamed))
        with pytest.raises(pulsar.IncompatibleSchema):
            client.subscribe(topic, "s", schema=JsonSchema(User1))
        # User2 cannot read User1's null ages; User3 widens age to long.
        with pytest.raises(pulsar.IncompatibleSchema):
            client.create_producer(topic, schema=AvroSchema(User2))
        client.create_producer(topic, schema=AvroSchema(User3))


def test_topic_strategy_overrides_namespace(broker: BrokerThread) -> None:
    """The topic policy wins: ALWAYS_INCOMPATIBLE on one topic of a FORWARD
    namespace refuses even a compatible change; ALWAYS_COMPATIBLE accepts any."""
    ns = _namespace(broker, "FORWARD")
    for strategy, refused in (("ALWAYS_INCOMPATIBLE", True), ("ALWAYS_COMPATIBLE", False)):
        topic = f"persistent://public/{ns}/t-{strategy.lower()}"
        url = f"{broker.http_url}/admin/v2/persistent/public/{ns}/t-{strategy.lower()}"
        assert http_call("PUT", f"{url}/schemaCompatibilityStrategy", strategy)[0] == 204
        with official_client(broker.url) as client:
            client.create_producer(topic, schema=AvroSchema(User1))
            client.create_producer(topic, schema=AvroSchema(User1))  # same schema: fine
            if refused:
                with pytest.raises(pulsar.IncompatibleSchema):
                    client.create_producer(topic, schema=AvroSchema(User2))
            else:
                client.create_producer(topic, schema=AvroSchema(Renamed))


def test_admin_post_check_and_delete(broker: BrokerThread) -> None:
    """POST registers a version, the compatibility endpoint answers without
    registering, DELETE removes every version and numbering goes on."""
    base = f"{broker.http_url}/admin/v2/schemas/public/default/admin-{uuid.uuid4().hex[:6]}"
    v1 = {"type": "AVRO", "schema": json.dumps(User1.schema()), "properties": {}}
    bad = {"type": "AVRO", "schema": json.dumps(Renamed.schema()), "properties": {}}
    assert http_call("GET", f"{base}/schema")[0] == 404
    assert http_call("POST", f"{base}/schema", v1) == (200, {"version": 0})
    assert http_call("POST", f"{base}/compatibility", bad) == (
        200,
        {"isCompatibility": False, "schemaCompatibilityStrategy": "FULL"},
    )
    assert http_call("POST", f"{base}/schema", bad)[0] == 409
    assert http_call("DELETE", f"{base}/schema") == (200, {"version": 1})
    assert http_call("GET", f"{base}/schema")[0] == 404
    assert http_call("POST", f"{base}/schema", bad) == (200, {"version": 2})
    assert http_call("POST", f"{base}/schema", {"type": "NOPE"})[0] == 400


def test_schemas_survive_a_restart(broker: BrokerThread) -> None:
    """Versions live in the metadata store."""
    topic = _topic()
    with official_client(broker.url) as client:
        client.create_producer(topic, schema=AvroSchema(User1))
    broker.restart()
    with official_client(broker.url) as client:
        producer = client.create_producer(topic, schema=AvroSchema(User1))
        consumer = client.subscribe(topic, "s", schema=AvroSchema(User1))
        producer.send(User1(name="x", age=3))
        assert consumer.receive(timeout_millis=10000).schema_version().encode() == V0


def test_key_value_schema_reads_back_as_key_and_value_json(broker: BrokerThread) -> None:
    """A KeyValue schema is stored in its wire form (two length-prefixed
    schemas); the REST API shows its data as Pulsar does, a JSON text with
    "key" and "value" (the official C++ client parses it so when its service
    URL is http://; its suite's LookupServiceTest.testGetKeyValueSchema)."""
    record = {"type": "record", "name": "cpx", "fields": [{"name": "re", "type": "double"}]}
    part = json.dumps(record).encode()
    wire = len(part).to_bytes(4, "big") + part + len(part).to_bytes(4, "big") + part
    topic = _topic()
    with RawClient.for_broker(broker) as raw:
        raw.connect()
        raw.send(
            pb.CommandProducer(
                topic=topic,
                producer_id=1,
                request_id=1,
                schema=pb.Schema(name="kv", type=pb.Schema.KeyValue, schema_data=wire),
            )
        )
        raw.expect(pb.BaseCommand.PRODUCER_SUCCESS)
    path = topic.split("://", 1)[1]
    status, body = http_call("GET", f"{broker.http_url}/admin/v2/schemas/{path}/schema")
    assert status == 200 and body["type"] == "KEY_VALUE"
    assert json.loads(body["data"]) == {"key": record, "value": record}


def test_auto_update_disabled_refuses_unregistered_schemas(broker: BrokerThread) -> None:
    """isAllowAutoUpdateSchema false (namespace policy, Pulsar's
    is_allow_auto_update_schema): a producer whose schema is not registered
    is refused with IncompatibleSchema, even on a topic without one; after
    the admin uploads the schema the producer connects; the namespace
    without the policy registers schemas as before."""
    ns = _namespace(broker, "FULL")
    base = f"{broker.http_url}/admin/v2/namespaces/public/{ns}"
    assert http_call("GET", f"{base}/isAllowAutoUpdateSchema") == (200, True)
    assert http_call("POST", f"{base}/isAllowAutoUpdateSchema", False) == (204, None)
    topic = f"persistent://public/{ns}/locked"
    with official_client(broker.url) as client:
        with pytest.raises(pulsar.IncompatibleSchema):
            client.create_producer(topic, schema=AvroSchema(User1))
        definition = AvroSchema(User1).schema_info().schema()
        upload = {"type": "AVRO", "schema": definition, "properties": {}}
        url = f"{broker.http_url}/admin/v2/schemas/public/{ns}/locked/schema"
        assert http_call("POST", url, upload)[0] == 200
        client.create_producer(topic, schema=AvroSchema(User1)).send(User1(name="a", age=1))
        client.create_producer(_topic(), schema=AvroSchema(User1)).send(User1(name="b", age=2))
