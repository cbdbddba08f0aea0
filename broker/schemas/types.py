"""SchemaData: one schema as the registry stores it, and the schema types
with their wire numbers (Schema.Type) and admin names (SchemaType)."""

from __future__ import annotations

import base64
import enum
import time
from dataclasses import dataclass, field
from typing import Any

from magnetar.proto import pulsar_api_pb2 as pb


class SchemaType(enum.IntEnum):
    """Admin names; the values are the wire Schema.Type numbers."""

    NONE = 0
    STRING = 1
    JSON = 2
    PROTOBUF = 3
    AVRO = 4
    BOOLEAN = 5
    INT8 = 6
    INT16 = 7
    INT32 = 8
    INT64 = 9
    FLOAT = 10
    DOUBLE = 11
    DATE = 12
    TIME = 13
    TIMESTAMP = 14
    KEY_VALUE = 15
    INSTANT = 16
    LOCAL_DATE = 17
    LOCAL_TIME = 18
    LOCAL_DATE_TIME = 19
    PROTOBUF_NATIVE = 20


@dataclass(frozen=True, slots=True)
class SchemaData:
    type: SchemaType
    data: bytes
    properties: dict[str, str] = field(default_factory=dict)
    name: str = ""

    def same_definition(self, other: SchemaData) -> bool:
        """Pulsar's schema identity: type and definition (not properties)."""
        return self.type is other.type and self.data == other.data


@dataclass(frozen=True, slots=True)
class SchemaVersion:
    """One stored version; a deleted marker ends the history before it."""

    version: int
    schema: SchemaData | None
    timestamp_ms: int

    @property
    def deleted(self) -> bool:
        return self.schema is None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"version": self.version, "timestamp": self.timestamp_ms}
        if self.schema is None:
            doc["deleted"] = True
        else:
            doc["type"] = self.schema.type.name
            doc["data"] = base64.b64encode(self.schema.data).decode()
            doc["properties"] = self.schema.properties
            doc["name"] = self.schema.name
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> SchemaVersion:
        schema = None
        if not doc.get("deleted"):
            schema = SchemaData(
                SchemaType[doc["type"]],
                base64.b64decode(doc["data"]),
                dict(doc.get("properties") or {}),
                str(doc.get("name", "")),
            )
        return cls(int(doc["version"]), schema, int(doc["timestamp"]))


def now_ms() -> int:
    return int(time.time() * 1000)


def from_wire(schema: pb.Schema) -> SchemaData | None:
    """The schema a PRODUCER / SUBSCRIBE / GET_OR_CREATE_SCHEMA carries; None
    for no schema (bytes), which the registry never stores."""
    if int(schema.type) == 0 or int(schema.type) not in SchemaType._value2member_map_:
        return None
    return SchemaData(
        SchemaType(schema.type),
        bytes(schema.schema_data),
        {p.key: p.value for p in schema.properties},
        schema.name,
    )


def to_wire(stored: SchemaVersion) -> pb.Schema:
    """A stored (not deleted) version as the wire's Schema."""
    schema = stored.schema
    assert schema is not None
    wire = pb.Schema(name=schema.name, schema_data=schema.data, type=int(schema.type))  # type: ignore[arg-type]
    for key, value in schema.properties.items():
        wire.properties.add(key=key, value=value)
    return wire


def version_bytes(version: int) -> bytes:
    """A schema version on the wire: 8 bytes, big-endian (WIRE 6)."""
    return version.to_bytes(8, "big", signed=True)


def version_from_bytes(data: bytes) -> int | None:
    """A schema version from the wire; None when absent or malformed."""
    if len(data) != 8:
        return None
    return int.from_bytes(data, "big", signed=True)
