"""Typed message payloads, shaped like the official `pulsar.schema` module.

    from magnetar.client.schema import AvroSchema, Integer, Record, String

    class User(Record):
        name = String()
        age = Integer()

    producer = client.create_producer("users", schema=AvroSchema(User))
    producer.send(User(name="Ada", age=36))

Submodules, as in the official package: `definition` (Record and the field
types), `schema` (Schema, SchemaInfo, BytesSchema, StringSchema, JsonSchema),
`schema_avro` (AvroSchema) and `schema_protobuf` (ProtobufNativeSchema).
"""

from .definition import (
    Array,
    Boolean,
    Bytes,
    CustomEnum,
    Double,
    Field,
    Float,
    Integer,
    Long,
    Map,
    Null,
    Record,
    String,
)
from .schema import (
    BytesSchema,
    JsonSchema,
    Schema,
    SchemaInfo as SchemaInfo,
    SchemaType as SchemaType,
    StringSchema,
)
from .schema_avro import AvroSchema
from .schema_protobuf import ProtobufNativeSchema

# What `from ... import *` gives: the official module's names. SchemaInfo and
# SchemaType are importable by name.
__all__ = [
    "Array",
    "AvroSchema",
    "Boolean",
    "Bytes",
    "BytesSchema",
    "CustomEnum",
    "Double",
    "Field",
    "Float",
    "Integer",
    "JsonSchema",
    "Long",
    "Map",
    "Null",
    "ProtobufNativeSchema",
    "Record",
    "Schema",
    "String",
    "StringSchema",
]
