"""Schema compatibility strategies (Pulsar's SchemaCompatibilityStrategy).

Avro and JSON (Avro-defined) schemas are checked with fastavro: sample data
is generated from the writer schema, encoded with it and decoded with the
reader schema, so fastavro's own schema resolution decides readability.
ProtobufNative schemas are compatible while their root message type stays
the same. Other schema types are compatible with schemas of the same type,
as in Pulsar; a different type is never compatible.
"""

from __future__ import annotations

import enum
import io
import json
import random
from collections.abc import Sequence
from typing import Any

from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.read import SchemaResolutionError
from fastavro.utils import generate_many

from magnetar.broker.errors import BrokerServiceError
from magnetar.broker.schemas.types import SchemaData, SchemaType
from magnetar.proto.errors import ServerError

# Enough random samples that every branch of a small union or enum is
# almost surely exercised; the seed keeps one answer per schema pair.
_SAMPLES = 64
_SEED = 20240601


class Strategy(enum.Enum):
    ALWAYS_INCOMPATIBLE = "ALWAYS_INCOMPATIBLE"
    ALWAYS_COMPATIBLE = "ALWAYS_COMPATIBLE"
    BACKWARD = "BACKWARD"
    FORWARD = "FORWARD"
    FULL = "FULL"
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL_TRANSITIVE = "FULL_TRANSITIVE"

    @property
    def transitive(self) -> bool:
        return self.name.endswith("_TRANSITIVE")

    @classmethod
    def parse(cls, value: object) -> Strategy | None:
        """A strategy from its admin name; None for UNDEFINED (inherit)."""
        if value is None or value == "UNDEFINED":
            return None
        if isinstance(value, str) and value in cls.__members__:
            return cls[value]
        raise ValueError(f"unknown schema compatibility strategy {value!r}")


# Pulsar broker.conf's schemaCompatibilityStrategy default.
DEFAULT_STRATEGY = Strategy.FULL


class IncompatibleSchemaError(BrokerServiceError):
    """The schema may not be used on the topic; the message says why."""

    def __init__(self, message: str) -> None:
        super().__init__(ServerError.IncompatibleSchema, message)


def _avro_definition(schema: SchemaData) -> Any:
    try:
        return json.loads(schema.data.decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise IncompatibleSchemaError(f"invalid {schema.type.name} schema: {exc}") from exc


def _parse(definition: Any) -> Any:
    try:
        # A fresh named-schema table per parse: reader and writer may both
        # define a type of the same name.
        return parse_schema(definition, named_schemas={})
    except Exception as exc:  # fastavro raises several kinds for a bad schema
        raise IncompatibleSchemaError(f"invalid Avro schema: {exc}") from exc


def validate(schema: SchemaData) -> None:
    """Refuse an Avro schema that does not parse (JSON may be a JSON Schema)."""
    if schema.type is SchemaType.AVRO:
        _parse(_avro_definition(schema))


def _is_avro_based(schema: SchemaData) -> bool:
    if schema.type is SchemaType.AVRO:
        return True
    if schema.type is SchemaType.JSON:
        try:
            definition = json.loads(schema.data.decode())
        except (UnicodeDecodeError, json.JSONDecodeError):
            return False
        # An Avro-defined JSON schema; an old-style JSON Schema has no Avro type.
        return isinstance(definition, dict) and definition.get("type") == "record"
    return False


def _protobuf_root(schema: SchemaData) -> object:
    """A ProtobufNative schema's root message type: Pulsar's check refuses a
    change of it ("Protobuf root message isn't allow change") and nothing
    else."""
    try:
        definition = json.loads(schema.data)
    except ValueError:
        return None
    return definition.get("rootMessageTypeName") if isinstance(definition, dict) else None


def can_read(reader: SchemaData, writer: SchemaData) -> bool:
    """Whether data written with `writer` can be read with `reader`."""
    if reader.type is not writer.type:
        return False
    if reader.type is SchemaType.PROTOBUF_NATIVE:
        return _protobuf_root(reader) == _protobuf_root(writer)
    if not (_is_avro_based(reader) and _is_avro_based(writer)):
        return True
    reader_def = _avro_definition(reader)
    writer_def = _avro_definition(writer)
    # Avro's resolving grammar (which Pulsar's check uses) does not compare
    # the outer record's name; fastavro does, so align it.
    if (
        isinstance(reader_def, dict)
        and isinstance(writer_def, dict)
        and reader_def.get("type") == writer_def.get("type") == "record"
    ):
        reader_def = {**reader_def, "name": writer_def.get("name")}
        reader_def.pop("namespace", None)
        if "namespace" in writer_def:
            reader_def["namespace"] = writer_def["namespace"]
    parsed_reader = _parse(reader_def)
    parsed_writer = _parse(writer_def)
    state = random.getstate()
    random.seed(_SEED)
    try:
        samples = list(generate_many(parsed_writer, _SAMPLES))
    finally:
        random.setstate(state)
    for sample in samples:
        buffer = io.BytesIO()
        schemaless_writer(buffer, parsed_writer, sample)
        buffer.seek(0)
        try:
            schemaless_reader(buffer, parsed_writer, parsed_reader)
        except (SchemaResolutionError, ValueError, KeyError, TypeError):
            return False
    return True


def check(new: SchemaData, existing: Sequence[SchemaData], strategy: Strategy) -> None:
    """Raise IncompatibleSchemaError unless `new` may follow `existing`
    (oldest first) under `strategy`."""
    if not existing or strategy is Strategy.ALWAYS_COMPATIBLE:
        return
    if strategy is Strategy.ALWAYS_INCOMPATIBLE:
        raise IncompatibleSchemaError("the topic's strategy is ALWAYS_INCOMPATIBLE")
    validate(new)
    against = existing if strategy.transitive else existing[-1:]
    base = strategy.name.removesuffix("_TRANSITIVE")
    for old in reversed(against):
        if old.type is not new.type:
            raise IncompatibleSchemaError(
                f"schema type {new.type.name} differs from the topic's {old.type.name}"
            )
        if base in ("BACKWARD", "FULL") and not can_read(new, old):
            raise IncompatibleSchemaError(
                f"the new schema cannot read data written with an existing one ({strategy.name})"
            )
        if base in ("FORWARD", "FULL") and not can_read(old, new):
            raise IncompatibleSchemaError(
                f"an existing schema cannot read data written with the new one ({strategy.name})"
            )
