"""Schema compatibility strategies (issue 16): each strategy accepts one
evolution and refuses another, checked with fastavro's schema resolution."""

from __future__ import annotations

import json
from typing import Any

import pytest

from magnetar.broker.schemas.compatibility import (
    IncompatibleSchemaError,
    Strategy,
    can_read,
    check,
)
from magnetar.broker.schemas.types import SchemaData, SchemaType


def avro(name: str, *fields: dict[str, Any], kind: SchemaType = SchemaType.AVRO) -> SchemaData:
    doc = {"type": "record", "name": name, "fields": list(fields)}
    return SchemaData(kind, json.dumps(doc).encode())


NAME = {"name": "name", "type": "string"}
AGE = {"name": "age", "type": "int"}
AGE_DEFAULT = {"name": "age", "type": "int", "default": 0}
AGE_OPTIONAL = {"name": "age", "type": ["null", "int"], "default": None}

V1 = avro("User", NAME)
WITH_AGE = avro("User", NAME, AGE)  # new required field, no default
WITH_AGE_DEFAULT = avro("User", NAME, AGE_DEFAULT)
ONLY_AGE = avro("User", AGE)  # drops "name", which V1 requires


def test_reader_with_a_defaulted_new_field_reads_old_data() -> None:
    """A field the writer lacks resolves to the reader's default, and only then."""
    assert can_read(WITH_AGE_DEFAULT, V1)
    assert not can_read(WITH_AGE, V1)
    assert can_read(V1, WITH_AGE)  # a reader ignores fields it does not know


def test_outer_record_name_is_not_compared() -> None:
    """Pulsar (Avro's resolving grammar) accepts a renamed outer record, as
    the official suite's test_schema_evolve (User1 then User2) relies on."""
    assert can_read(avro("User2", NAME), avro("User1", NAME))


def test_type_promotion_and_union_narrowing() -> None:
    assert can_read(avro("R", {"name": "x", "type": "long"}), avro("R", AGE | {"name": "x"}))
    assert not can_read(avro("R", AGE | {"name": "x"}), avro("R", {"name": "x", "type": "long"}))
    assert not can_read(avro("R", AGE), avro("R", AGE_OPTIONAL))


@pytest.mark.parametrize(
    ("strategy", "accepted", "refused"),
    [
        (Strategy.BACKWARD, WITH_AGE_DEFAULT, WITH_AGE),
        (Strategy.FORWARD, WITH_AGE, ONLY_AGE),
        (Strategy.FULL, WITH_AGE_DEFAULT, WITH_AGE),
        (Strategy.BACKWARD_TRANSITIVE, WITH_AGE_DEFAULT, WITH_AGE),
        (Strategy.FORWARD_TRANSITIVE, WITH_AGE, ONLY_AGE),
        (Strategy.FULL_TRANSITIVE, WITH_AGE_DEFAULT, WITH_AGE),
    ],
)
def test_strategy_against_the_latest(
    strategy: Strategy, accepted: SchemaData, refused: SchemaData
) -> None:
    check(accepted, [V1], strategy)
    with pytest.raises(IncompatibleSchemaError):
        check(refused, [V1], strategy)


def test_transitive_strategies_check_every_version() -> None:
    """V1 -> V2 (age added with a default) -> V3 (age required, no default):
    V3 reads V2's data, but not V1's."""
    v3 = avro("User", NAME, AGE)
    history = [V1, WITH_AGE_DEFAULT]
    check(v3, history, Strategy.BACKWARD)
    with pytest.raises(IncompatibleSchemaError):
        check(v3, history, Strategy.BACKWARD_TRANSITIVE)
    # Forward: V1 must read the new data; V3 without "name" fails only there.
    v3_forward = avro("User", AGE)
    history_forward = [V1, avro("User", {"name": "name", "type": "string", "default": ""}, AGE)]
    check(v3_forward, history_forward, Strategy.FORWARD)
    with pytest.raises(IncompatibleSchemaError):
        check(v3_forward, history_forward, Strategy.FORWARD_TRANSITIVE)


def test_always_compatible_and_always_incompatible() -> None:
    check(ONLY_AGE, [V1], Strategy.ALWAYS_COMPATIBLE)
    check(V1, [], Strategy.ALWAYS_INCOMPATIBLE)  # the first version is always allowed
    with pytest.raises(IncompatibleSchemaError):
        check(WITH_AGE_DEFAULT, [V1], Strategy.ALWAYS_INCOMPATIBLE)


def test_json_schemas_are_checked_as_avro_and_types_must_match() -> None:
    json_v1 = avro("User", NAME, kind=SchemaType.JSON)
    check(avro("User", NAME, AGE_DEFAULT, kind=SchemaType.JSON), [json_v1], Strategy.FULL)
    with pytest.raises(IncompatibleSchemaError):
        check(
            avro("User", {"name": "name", "type": "int"}, kind=SchemaType.JSON),
            [json_v1],
            Strategy.FULL,
        )
    with pytest.raises(IncompatibleSchemaError):
        check(SchemaData(SchemaType.STRING, b""), [json_v1], Strategy.FULL)


def test_invalid_avro_is_refused() -> None:
    with pytest.raises(IncompatibleSchemaError):
        check(SchemaData(SchemaType.AVRO, b"{not json"), [V1], Strategy.FULL)
    with pytest.raises(IncompatibleSchemaError):
        check(SchemaData(SchemaType.AVRO, b'{"type": "nope"}'), [V1], Strategy.FULL)


def test_strategy_names() -> None:
    assert Strategy.parse("FORWARD") is Strategy.FORWARD
    assert Strategy.parse("UNDEFINED") is None
    with pytest.raises(ValueError):
        Strategy.parse("SIDEWAYS")


def _protobuf_native(root: str, file_set: str = "AAAA") -> SchemaData:
    definition = {
        "fileDescriptorSet": file_set,
        "rootMessageTypeName": root,
        "rootFileDescriptorName": "Test.proto",
    }
    return SchemaData(SchemaType.PROTOBUF_NATIVE, json.dumps(definition).encode())


def test_protobuf_native_root_message_may_not_change() -> None:
    """Pulsar's ProtobufNative check: another root message type is
    incompatible under any checking strategy; the same root with another
    descriptor set (a new field) is not refused."""
    first = _protobuf_native("proto.TestMessage")
    with pytest.raises(IncompatibleSchemaError, match="cannot read"):
        check(_protobuf_native("proto.external.ExternalMessage"), [first], Strategy.FULL)
    check(_protobuf_native("proto.TestMessage", "BBBB"), [first], Strategy.FULL)
    check(_protobuf_native("proto.other.Other"), [first], Strategy.ALWAYS_COMPATIBLE)
