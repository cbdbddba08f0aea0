"""Avro schema: records (or plain dicts, with a hand-written definition) in
Avro's binary encoding, through fastavro. No framing: a payload is the bare
datum (fastavro's "schemaless" form), which is what Pulsar clients exchange.
"""

from __future__ import annotations

import io
import json
from enum import Enum
from typing import Any

import fastavro

from magnetar.client.aio.log import get_logger

from .definition import Record
from .schema import Schema, SchemaType, _MessageLike

__all__ = ["AvroSchema"]

log = get_logger(__name__)

ParsedSchema = fastavro.types.Schema


def _to_avro(value: Any) -> Any:
    """A value as fastavro takes it: records as dicts, enums by name."""
    if isinstance(value, Record):
        return {name: _to_avro(getattr(value, name)) for name in value._fields}
    if isinstance(value, Enum):
        return value.name
    if isinstance(value, list | tuple):
        return [_to_avro(item) for item in value]
    if isinstance(value, dict):
        return {key: _to_avro(item) for key, item in value.items()}
    return value


def _plain_definition(definition: Any) -> Any:
    """A definition without the bookkeeping keys fastavro adds to schemas it
    has parsed (`fastavro.schema.load_schema` returns such), which are not
    part of the Avro schema and should not reach the broker."""
    if isinstance(definition, dict):
        return {
            key: _plain_definition(value)
            for key, value in definition.items()
            if key not in ("__fastavro_parsed", "__named_schemas")
        }
    if isinstance(definition, list):
        return [_plain_definition(item) for item in definition]
    return definition


def _schema_version(msg: object) -> int | None:
    """The message's schema version as a number, or None if it has none."""
    as_int = getattr(msg, "int_schema_version", None)
    if callable(as_int):
        version = as_int()
        return version if isinstance(version, int) and version >= 0 else None
    raw = getattr(msg, "schema_version", None)
    if callable(raw):
        raw = raw()
    if isinstance(raw, str):
        raw = raw.encode("latin-1")
    if isinstance(raw, bytes) and raw:
        return int.from_bytes(raw, "big")
    return None


class AvroSchema(Schema[Any]):
    """Avro binary payloads.

    `AvroSchema(RecordClass)` encodes and decodes instances of a Record class.
    `AvroSchema(None, schema_definition=definition)` works on dicts shaped by
    an Avro schema given as a dict (or its JSON text).

    A consumer's schema, once attached to its client, decodes each message
    with the schema version that wrote it (fetched from the broker once per
    version) and resolves it to this reader schema, so records written by an
    older or newer compatible schema still decode.
    """

    def __init__(self, record_cls: type[Record] | None, schema_definition: Any = None) -> None:
        if record_cls is None and schema_definition is None:
            raise AssertionError(
                "The param record_cls and schema_definition shouldn't be both None."
            )
        if record_cls is not None:
            definition: Any = record_cls.schema()
        elif isinstance(schema_definition, str | bytes):
            definition = json.loads(schema_definition)
        else:
            definition = _plain_definition(schema_definition)
        self._schema: Any = definition
        # Parsed on first use: a definition fastavro rejects fails on encode
        # or decode, as with the official client, not at construction.
        self._parsed: ParsedSchema | None = None
        # (topic, version) -> the writer's parsed schema; None means "same as ours".
        self._writer_schemas: dict[tuple[str, int], ParsedSchema | None] = {}
        super().__init__(record_cls, SchemaType.AVRO, definition, "AVRO")

    def _reader_schema(self) -> ParsedSchema:
        if self._parsed is None:
            self._parsed = fastavro.parse_schema(self._schema)
        return self._parsed

    def encode(self, obj: Any) -> bytes:
        if self._record_cls is not None:
            self._validate_object_type(obj)
        elif not isinstance(obj, dict):
            raise ValueError("If using the custom schema, the record data should be dict type.")
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, self._reader_schema(), _to_avro(obj))
        return buffer.getvalue()

    def decode(self, data: bytes) -> Any:
        return self._read(data, None)

    def decode_message(self, msg: _MessageLike) -> Any:
        data = msg.data()
        topic_name = getattr(msg, "topic_name", None)
        version = _schema_version(msg)
        client = self._client
        if client is None or version is None or not callable(topic_name):
            return self.decode(data)
        topic = topic_name()
        try:
            return self._read(data, self._writer_schema(client, topic, version))
        except Exception as exc:
            # The reader schema is the best remaining guess.
            log.warning(
                "decoding with the writer's schema failed; using the reader's",
                topic=topic,
                version=version,
                error=str(exc),
            )
            return self.decode(data)

    def _writer_schema(self, client: Any, topic: str, version: int) -> ParsedSchema | None:
        key = (topic, version)
        if key in self._writer_schemas:
            return self._writer_schemas[key]
        info = client.get_schema_info(topic, version)
        if info.schema_type() != SchemaType.AVRO:
            raise RuntimeError(
                f'The schema type of topic "{topic}" and version {version} is {info.schema_type()}'
            )
        writer = _plain_definition(json.loads(info.schema()))
        parsed: ParsedSchema | None = None
        if writer != self._schema:
            # fastavro resolves records by name; a renamed top-level record
            # (another class name, same fields) is still the same message.
            if isinstance(writer, dict) and isinstance(self._schema, dict):
                writer["name"] = self._schema.get("name")
                writer.pop("namespace", None)
                if "namespace" in self._schema:
                    writer["namespace"] = self._schema["namespace"]
            parsed = fastavro.parse_schema(writer)
        self._writer_schemas[key] = parsed
        return parsed

    def _read(self, data: bytes, writer: ParsedSchema | None) -> Any:
        reader = self._reader_schema()
        buffer = io.BytesIO(data)
        if writer is None:
            datum = fastavro.schemaless_reader(buffer, reader, None)
        else:
            datum = fastavro.schemaless_reader(buffer, writer, reader)
        if self._record_cls is None:
            return datum
        if not isinstance(datum, dict):
            raise TypeError(f"Avro datum for {self._record_cls.__name__} is not a record")
        return self._record_cls(**datum)

    def __str__(self) -> str:
        if self._record_cls is not None:
            return f"AvroSchema({self._record_cls.__name__})"
        name = self._schema.get("name") if isinstance(self._schema, dict) else None
        return f"AvroSchema({name or 'custom'})"
