"""Schemas: how a producer turns values into message payloads and a consumer
turns payloads back, plus what each declares to the broker (`SchemaInfo`).

Every schema object offers `encode(obj) -> bytes`, `decode(data) -> value`
and `schema_info()`. The definitions and payloads match the official
`pulsar.schema` byte for byte, so either client can read the other's
messages and registers the same schema for a topic.
"""

from __future__ import annotations

import abc
import json
from collections.abc import Mapping
from enum import Enum, IntEnum
from typing import Any, Generic, Protocol, TypeVar

from .definition import Record

__all__ = [
    "BytesSchema",
    "JsonSchema",
    "Schema",
    "SchemaInfo",
    "SchemaType",
    "StringSchema",
]


class SchemaType(IntEnum):
    """The protocol's `Schema.Type` values (what goes on the wire)."""

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
    AUTO_CONSUME = 21
    # Aliases. Raw bytes travel as NONE (the official binding's BYTES is a
    # client-side marker meaning "no schema"); the rest are the one-word
    # spellings of the protocol's names.
    BYTES = 0
    KEYVALUE = 15
    LOCALDATE = 17
    LOCALTIME = 18
    LOCALDATETIME = 19
    PROTOBUFNATIVE = 20


def _schema_type(value: int) -> int:
    try:
        return SchemaType(value)
    except ValueError:
        return int(value)  # a type newer than this module: kept as a number


class SchemaInfo:
    """A schema as the broker sees it: type, name, definition, properties.

    Same accessors as the official binding's `_pulsar.SchemaInfo`
    (`schema_type()`, `name()`, `schema()`), plus `properties()` and
    `schema_data()`, the definition as the bytes sent on the wire.
    """

    __slots__ = ("_data", "_name", "_properties", "_type")

    def __init__(
        self,
        schema_type: int,
        name: str,
        schema: str | bytes = b"",
        properties: Mapping[str, str] | None = None,
    ) -> None:
        self._type = _schema_type(schema_type)
        self._name = name
        self._data = schema.encode("utf-8") if isinstance(schema, str) else bytes(schema)
        self._properties = dict(properties) if properties else {}

    def schema_type(self) -> int:
        """The protocol's schema type number (a SchemaType when known)."""
        return self._type

    def name(self) -> str:
        return self._name

    def schema(self) -> str:
        """The definition as text (JSON for Avro, JSON and protobuf-native)."""
        return self._data.decode("utf-8", errors="replace")

    def schema_data(self) -> bytes:
        """The definition exactly as sent to or received from the broker."""
        return self._data

    def properties(self) -> dict[str, str]:
        return dict(self._properties)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SchemaInfo):
            return NotImplemented
        return (self._type, self._name, self._data, self._properties) == (
            other._type,
            other._name,
            other._data,
            other._properties,
        )

    def __hash__(self) -> int:
        return hash((self._type, self._name, self._data))

    def __repr__(self) -> str:
        kind = self._type.name if isinstance(self._type, SchemaType) else self._type
        return f"SchemaInfo({kind}, {self._name!r}, {self.schema()!r}, {self._properties!r})"


class _MessageLike(Protocol):
    def data(self) -> bytes: ...


T = TypeVar("T")
R = TypeVar("R", bound=Record)


class Schema(abc.ABC, Generic[T]):
    """Base of all schemas. A subclass implements `encode` and `decode`.

    `schema_definition` is JSON-ready data (or None); what the broker gets is
    its `json.dumps(..., indent=1)` text, the official client's formatting.
    """

    def __init__(
        self,
        record_cls: Any,
        schema_type: int,
        schema_definition: Any,
        schema_name: str,
        properties: Mapping[str, str] | None = None,
    ) -> None:
        self._record_cls = record_cls
        self._client: Any = None
        self._schema_info = SchemaInfo(
            schema_type, schema_name, json.dumps(schema_definition, indent=1), properties
        )

    @abc.abstractmethod
    def encode(self, obj: T) -> bytes:
        """`obj` as the message payload."""

    @abc.abstractmethod
    def decode(self, data: bytes) -> T:
        """A payload back as an object."""

    def decode_message(self, msg: _MessageLike) -> T:
        """Decode a received message (schemas that need the message's schema
        version override this)."""
        return self.decode(msg.data())

    def schema_info(self) -> SchemaInfo:
        return self._schema_info

    def attach_client(self, client: Any) -> None:
        """Called by a consumer with its client, for schemas that fetch the
        writer's schema from the broker."""
        self._client = client

    def _validate_object_type(self, obj: object) -> None:
        if not isinstance(obj, self._record_cls):
            raise TypeError(
                f"Invalid record obj of type {type(obj)} - expected type is {self._record_cls}"
            )


def _as_bytes(data: Any) -> bytes:
    return data if isinstance(data, bytes) else bytes(data)


class BytesSchema(Schema[bytes]):
    """Payloads are the bytes given; no schema is registered for a topic."""

    def __init__(self) -> None:
        super().__init__(bytes, SchemaType.BYTES, None, "BYTES")

    def encode(self, obj: bytes) -> bytes:
        if isinstance(obj, bytearray | memoryview):
            return bytes(obj)
        self._validate_object_type(obj)
        return obj

    def decode(self, data: bytes) -> bytes:
        return _as_bytes(data)

    def __str__(self) -> str:
        return "BytesSchema"


class StringSchema(Schema[str]):
    """Payloads are UTF-8 text."""

    def __init__(self) -> None:
        super().__init__(str, SchemaType.STRING, None, "STRING")

    def encode(self, obj: str) -> bytes:
        self._validate_object_type(obj)
        return obj.encode("utf-8")

    def decode(self, data: bytes) -> str:
        return str(data, "utf-8")

    def __str__(self) -> str:
        return "StringSchema"


def _json_fields(record: Record) -> dict[str, Any]:
    # Declaration order, like the official client (which dumps the instance
    # __dict__), so both write the same text.
    return {name: getattr(record, name) for name in record._fields}


def _json_value(value: object) -> Any:
    """json.dumps' hook for what JSON has no type for."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, Record):
        return _json_fields(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


class JsonSchema(Schema[R]):
    """Records as JSON objects; the registered definition is the record's
    Avro schema, as Pulsar's JSON schema type expects.

    Enum fields are written as the member's value; bytes fields as text."""

    _record_cls: type[R]

    def __init__(self, record_cls: type[R]) -> None:
        super().__init__(record_cls, SchemaType.JSON, record_cls.schema(), "JSON")

    def encode(self, obj: R) -> bytes:
        self._validate_object_type(obj)
        text = json.dumps(_json_fields(obj), default=_json_value, indent=1)
        return text.encode("utf-8")

    def decode(self, data: bytes) -> R:
        fields = json.loads(data if isinstance(data, bytes | str) else bytes(data))
        return self._record_cls(**fields)

    def __str__(self) -> str:
        return f"JsonSchema({self._record_cls.__name__})"
