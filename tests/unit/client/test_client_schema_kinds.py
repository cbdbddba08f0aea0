"""Bytes, string, protobuf-native and hand-written Avro schemas, the
SchemaInfo a producer registers, and Avro decoding with the writer's schema.

Where the official `pulsar.schema` is installed, what we register and the
bytes we write are compared with its own for the same input.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from fastavro.schema import load_schema
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from magnetar.client import schema as ours
from magnetar.client.schema.schema import SchemaInfo, SchemaType


@pytest.fixture(scope="module")
def official() -> Any:
    return pytest.importorskip("pulsar.schema")


def _wire_type(official_type: Any) -> int:
    # The official binding's BYTES (-1) means "send no schema": NONE on the wire.
    return 0 if int(official_type) == -1 else int(official_type)


# --------------------------------------------------------------- bytes and string


@pytest.mark.parametrize("kind", ["BytesSchema", "StringSchema"])
def test_primitive_schema_info_matches_official(official: ModuleType, kind: str) -> None:
    """BytesSchema and StringSchema register the official name and text
    ("null", json of no definition) and the wire type (NONE / STRING)."""
    mine = getattr(ours, kind)().schema_info()
    theirs = getattr(official, kind)().schema_info()
    assert (mine.schema_type(), mine.name(), mine.schema()) == (
        _wire_type(theirs.schema_type()),
        theirs.name(),
        theirs.schema(),
    )
    assert str(getattr(ours, kind)()) == str(getattr(official, kind)())


def test_bytes_and_string_payloads(official: ModuleType) -> None:
    """Bytes pass through; strings are UTF-8; each rejects the other's type
    with TypeError, as the official client does."""
    for m in (ours, official):
        assert m.BytesSchema().encode(b"\x00hi") == b"\x00hi"
        assert m.BytesSchema().decode(b"\x00hi") == b"\x00hi"
        assert m.StringSchema().encode("héllo") == "héllo".encode()
        assert m.StringSchema().decode("héllo".encode()) == "héllo"
        with pytest.raises(TypeError):
            m.BytesSchema().encode("text")
        with pytest.raises(TypeError):
            m.StringSchema().encode(b"raw")
        with pytest.raises(UnicodeDecodeError):
            m.StringSchema().decode(b"\xff")


def test_string_schema_takes_no_record_class() -> None:
    """StringSchema(SomeRecord) is a TypeError (the official suite relies on
    it failing in test_json_schema)."""
    with pytest.raises(TypeError):
        ours.StringSchema(ours.Record)  # type: ignore[call-arg]


# --------------------------------------------------------------------- SchemaInfo


def test_schema_info_api() -> None:
    """SchemaInfo has the binding's accessors (constructed positionally as
    `SchemaInfo(type, name, schema)`) plus properties() and schema_data()."""
    info = SchemaInfo(SchemaType.AVRO, "AVRO", '{"type": "string"}', {"k": "v"})
    assert info.schema_type() == 4 and info.schema_type() is SchemaType.AVRO
    assert info.name() == "AVRO"
    assert info.schema() == '{"type": "string"}'
    assert info.schema_data() == b'{"type": "string"}'
    assert info.properties() == {"k": "v"}
    info.properties()["k"] = "changed"
    assert info.properties() == {"k": "v"}, "a copy"
    assert info == SchemaInfo(4, "AVRO", b'{"type": "string"}', {"k": "v"})
    assert SchemaInfo(1, "STRING").schema() == "" and SchemaInfo(1, "STRING").properties() == {}


def test_schema_type_values_are_the_protocols() -> None:
    """SchemaType numbers are the protocol's Schema.Type; the official
    binding's names are aliases; unknown numbers are kept."""
    from magnetar.proto import pulsar_api_pb2 as api

    wire = {name: int(number) for name, number in api.Schema.Type.items()}
    assert SchemaType.NONE == wire["None"] == SchemaType.BYTES
    assert SchemaType.KEY_VALUE == wire["KeyValue"] == SchemaType.KEYVALUE
    assert SchemaType.PROTOBUF_NATIVE == wire["ProtobufNative"] == 20
    assert wire["LocalDateTime"] == SchemaType.LOCAL_DATE_TIME
    assert SchemaInfo(99, "FUTURE").schema_type() == 99


def test_schema_info_types_match_official(official: ModuleType) -> None:
    """Each schema kind registers the official client's type number and name."""
    import _pulsar

    record = type("R", (ours.Record,), {"a": ours.Integer()})
    theirs_record = type("R", (official.Record,), {"a": official.Integer()})
    pairs = [
        (ours.JsonSchema(record), official.JsonSchema(theirs_record)),
        (ours.AvroSchema(record), official.AvroSchema(theirs_record)),
    ]
    for mine, theirs in pairs:
        assert mine.schema_info().schema_type() == int(theirs.schema_info().schema_type())
        assert mine.schema_info().name() == theirs.schema_info().name()
    assert int(_pulsar.SchemaType.JSON) == SchemaType.JSON
    assert int(_pulsar.SchemaType.PROTOBUF_NATIVE) == SchemaType.PROTOBUF_NATIVE


# ------------------------------------------------------------------ protobuf native


def _field(message: Any, name: str, number: int, kind: int, type_name: str = "") -> None:
    field = message.field.add()
    field.name, field.number, field.type = name, number, kind
    field.label = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
    if type_name:
        field.type_name = type_name


def _protobuf_classes() -> tuple[Any, Any]:
    """test.TestMessage (bound to `Simple`: pytest collects Test* names) and
    test.Outer, whose field's type is in an imported file."""
    fdp = descriptor_pb2.FieldDescriptorProto
    dep = descriptor_pb2.FileDescriptorProto(name="dep.proto", package="dep", syntax="proto3")
    inner = dep.message_type.add(name="Inner")
    _field(inner, "inner_str", 1, fdp.TYPE_STRING)
    _field(inner, "inner_int", 2, fdp.TYPE_INT64)

    main = descriptor_pb2.FileDescriptorProto(
        name="test_schema.proto", package="test", syntax="proto3", dependency=["dep.proto"]
    )
    test_message = main.message_type.add(name="TestMessage")
    _field(test_message, "name", 1, fdp.TYPE_STRING)
    _field(test_message, "value", 2, fdp.TYPE_INT32)
    outer = main.message_type.add(name="Outer")
    _field(outer, "d", 1, fdp.TYPE_DOUBLE)
    _field(outer, "nested", 2, fdp.TYPE_MESSAGE, ".dep.Inner")

    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(dep.SerializeToString())
    pool.AddSerializedFile(main.SerializeToString())
    return tuple(  # type: ignore[return-value]
        message_factory.GetMessageClass(pool.FindMessageTypeByName(name))
        for name in ("test.TestMessage", "test.Outer")
    )


Simple, Outer = _protobuf_classes()


def test_protobuf_definition_matches_official(official: ModuleType) -> None:
    """ProtobufNativeSchema registers the official (and Java) definition:
    ProtobufNativeSchemaData JSON with the imported file before its importer."""
    mine = ours.ProtobufNativeSchema(Outer).schema_info()
    theirs = official.ProtobufNativeSchema(Outer).schema_info()
    assert mine.schema() == theirs.schema()
    assert (mine.schema_type(), mine.name()) == (20, "PROTOBUF_NATIVE")
    assert mine.schema_type() == int(theirs.schema_type())
    definition = json.loads(mine.schema())
    assert definition["rootMessageTypeName"] == "test.Outer"
    assert definition["rootFileDescriptorName"] == "test_schema.proto"
    files = descriptor_pb2.FileDescriptorSet.FromString(
        base64.b64decode(definition["fileDescriptorSet"])
    )
    assert [f.name for f in files.file] == ["dep.proto", "test_schema.proto"]


def test_protobuf_payloads(official: ModuleType) -> None:
    """Payloads are the message's protobuf bytes, as the official client
    writes them, and decode to an equal message (nested ones too)."""
    inner_cls = type(Outer().nested)
    for cls, message in (
        (Simple, Simple(name="hello", value=42)),
        (Outer, Outer(d=3.14, nested=inner_cls(inner_str="inner", inner_int=999))),
    ):
        schema = ours.ProtobufNativeSchema(cls)
        data = schema.encode(message)
        assert data == official.ProtobufNativeSchema(cls).encode(message)
        assert data == message.SerializeToString()
        assert schema.decode(data) == message
    assert str(ours.ProtobufNativeSchema(Simple)) == "ProtobufNativeSchema(TestMessage)"


def test_protobuf_rejects_wrong_types() -> None:
    """A non-message class, or encoding something not of the class, is a
    TypeError (schema_test.py ProtobufNativeSchemaTest)."""
    with pytest.raises(TypeError):
        ours.ProtobufNativeSchema(str)  # type: ignore[type-var]
    with pytest.raises(TypeError):
        ours.ProtobufNativeSchema(Simple).encode("not a protobuf message")


# ----------------------------------------------------------- hand-written Avro schema

COMPANY: dict[str, Any] = {
    "doc": "this is doc",
    "namespace": "example.avro",
    "type": "record",
    "name": "Company",
    "fields": [
        {"name": "name", "type": ["null", "string"]},
        {"name": "address", "type": ["null", "string"]},
        {
            "name": "employees",
            "type": [
                "null",
                {
                    "type": "array",
                    "items": {
                        "type": "record",
                        "name": "Employee",
                        "fields": [
                            {"name": "name", "type": ["null", "string"]},
                            {"name": "age", "type": ["null", "int"]},
                        ],
                    },
                },
            ],
        },
        {"name": "labels", "type": ["null", {"type": "map", "values": "string"}]},
        {
            "name": "companyType",
            "type": [
                "null",
                {
                    "type": "enum",
                    "name": "CompanyType",
                    "symbols": ["companyType1", "companyType2"],
                },
            ],
        },
    ],
}

A_COMPANY = {
    "name": "company-name",
    "address": "xxx road xxx street",
    "employees": [{"name": "user1", "age": 25}, {"name": "user2", "age": 30}],
    "labels": {"industry": "software", "scale": ">100"},
    "companyType": "companyType2",
}


def test_custom_avro_definition_matches_official(official: ModuleType) -> None:
    """AvroSchema(None, schema_definition=dict) registers the official text,
    encodes dicts to the official bytes and decodes back to the dict
    (schema_test.py custom_schema_test)."""
    mine = ours.AvroSchema(None, schema_definition=COMPANY)
    theirs = official.AvroSchema(None, schema_definition=COMPANY)
    assert mine.schema_info().schema() == theirs.schema_info().schema()
    data = mine.encode(A_COMPANY)
    assert data == theirs.encode(A_COMPANY)
    assert mine.decode(data) == A_COMPANY
    with pytest.raises(ValueError):
        mine.encode(["not", "a", "dict"])
    assert ours.AvroSchema(None, schema_definition=json.dumps(COMPANY)).encode(A_COMPANY) == data


def test_loaded_avro_definition_drops_fastavro_bookkeeping(
    official: ModuleType, tmp_path: Path
) -> None:
    """A definition from fastavro.schema.load_schema works the same, but the
    text we register leaves out fastavro's private keys (the official client
    sends them along)."""
    path = tmp_path / "company.avsc"
    path.write_text(json.dumps(COMPANY))
    loaded = load_schema(str(path))
    mine = ours.AvroSchema(None, schema_definition=loaded)
    registered = json.loads(mine.schema_info().schema())
    assert "__fastavro_parsed" not in registered and "__named_schemas" not in registered
    data = mine.encode(A_COMPANY)
    assert data == official.AvroSchema(None, schema_definition=loaded).encode(A_COMPANY)
    assert mine.decode(data) == A_COMPANY


def test_avro_needs_a_class_or_a_definition() -> None:
    """AvroSchema(None) without a definition is an AssertionError, as in the
    official client."""
    with pytest.raises(AssertionError):
        ours.AvroSchema(None)


# ------------------------------------------------ Avro decoding with the writer's schema


class _Message:
    def __init__(self, data: bytes, version: int, topic: str = "persistent://t/n/evolve") -> None:
        self._data, self._version, self._topic = data, version, topic

    def data(self) -> bytes:
        return self._data

    def topic_name(self) -> str:
        return self._topic

    def schema_version(self) -> bytes:
        return self._version.to_bytes(8, "big")


class _Client:
    """Answers get_schema_info from a {version: SchemaInfo} table."""

    def __init__(self, versions: dict[int, SchemaInfo]) -> None:
        self.versions = versions
        self.asked: list[tuple[str, int]] = []

    def get_schema_info(self, topic: str, version: int) -> SchemaInfo:
        self.asked.append((topic, version))
        return self.versions[version]


def _users() -> tuple[Any, Any]:
    user1 = type("User1", (ours.Record,), {"name": ours.String(), "age": ours.Integer()})
    user2 = type(
        "User2",
        (ours.Record,),
        {"_sorted_fields": True, "name": ours.String(), "age": ours.Integer(required=True)},
    )
    return user1, user2


def test_decode_message_resolves_the_writers_schema() -> None:
    """A consumer's AvroSchema decodes each message with the schema version
    that wrote it, fetched once per version (schema_test.py test_schema_evolve:
    User2 has other field order and a required field, read as User1)."""
    user1, user2 = _users()
    writer = ours.AvroSchema(user2)
    client = _Client({0: ours.AvroSchema(user1).schema_info(), 1: writer.schema_info()})
    reader = ours.AvroSchema(user1)
    reader.attach_client(client)
    for i in range(3):
        old = reader.decode_message(
            _Message(ours.AvroSchema(user1).encode(user1(name="a", age=i)), 0)
        )
        new = reader.decode_message(_Message(writer.encode(user2(name=f"b{i}", age=200 + i)), 1))
        assert type(old) is user1 and (old.name, old.age) == ("a", i)
        assert type(new) is user1 and (new.name, new.age) == (f"b{i}", 200 + i)
    assert client.asked == [("persistent://t/n/evolve", 0), ("persistent://t/n/evolve", 1)]


def test_decode_message_without_client_or_version_uses_own_schema() -> None:
    """Without an attached client, or for a message with no schema version,
    the reader's schema decodes (as plain decode())."""
    user1, _ = _users()
    schema = ours.AvroSchema(user1)
    data = schema.encode(user1(name="x", age=1))
    assert schema.decode_message(_Message(data, 0)) == user1(name="x", age=1)

    class NoVersion(_Message):
        def schema_version(self) -> bytes:
            return b""

    schema.attach_client(_Client({}))
    assert schema.decode_message(NoVersion(data, 0)) == user1(name="x", age=1)


def test_decode_message_falls_back_when_lookup_fails() -> None:
    """If the writer's schema cannot be had (lookup error, not Avro), the
    message is decoded with the reader's schema rather than lost."""
    user1, _ = _users()
    schema = ours.AvroSchema(user1)
    data = schema.encode(user1(name="x", age=1))
    schema.attach_client(_Client({3: SchemaInfo(SchemaType.JSON, "JSON", "{}")}))
    assert schema.decode_message(_Message(data, 3)) == user1(name="x", age=1)
    assert schema.decode_message(_Message(data, 4)) == user1(name="x", age=1)  # KeyError


def test_official_style_int_schema_version_is_used() -> None:
    """A message exposing int_schema_version() (the official binding's) is
    resolved by that number."""
    user1, user2 = _users()
    client = _Client({7: ours.AvroSchema(user2).schema_info()})
    reader = ours.AvroSchema(user1)
    reader.attach_client(client)

    class Official(_Message):
        def int_schema_version(self) -> int:
            return 7

    data = ours.AvroSchema(user2).encode(user2(name="n", age=5))
    got = reader.decode_message(Official(data, 0))
    assert (got.name, got.age) == ("n", 5)
    assert client.asked == [("persistent://t/n/evolve", 7)]
