"""Protobuf-native schema: generated protobuf messages in protobuf's own
binary encoding.

The registered definition is Pulsar's `ProtobufNativeSchemaData` JSON (what
the Java client's ProtobufNativeSchema registers): the message's .proto file
and everything it imports as a base64 `FileDescriptorSet`, and the names of
the root message and its file.
"""

from __future__ import annotations

import base64
from typing import Any, TypeVar

from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import FileDescriptor
from google.protobuf.message import Message

from .schema import Schema, SchemaType

__all__ = ["ProtobufNativeSchema"]

M = TypeVar("M", bound=Message)


def _add_file(file: FileDescriptor, seen: set[str], out: descriptor_pb2.FileDescriptorSet) -> None:
    # Imports before the files importing them, each file once, so a reader
    # can build the descriptor pool in one pass.
    if file.name in seen:
        return
    seen.add(file.name)
    for dependency in file.dependencies:
        _add_file(dependency, seen, out)
    file.CopyToProto(out.file.add())


def protobuf_native_definition(descriptor: Any) -> dict[str, Any]:
    """The ProtobufNativeSchemaData of a message type (`descriptor`: its
    Descriptor, from whichever protobuf backend made the class)."""
    files = descriptor_pb2.FileDescriptorSet()
    _add_file(descriptor.file, set(), files)
    return {
        "fileDescriptorSet": base64.b64encode(files.SerializeToString()).decode("ascii"),
        "rootMessageTypeName": descriptor.full_name,
        "rootFileDescriptorName": descriptor.file.name,
    }


class ProtobufNativeSchema(Schema[M]):
    """Payloads are `record_cls` messages serialized by protobuf."""

    _record_cls: type[M]

    def __init__(self, record_cls: type[M]) -> None:
        if not (isinstance(record_cls, type) and issubclass(record_cls, Message)):
            raise TypeError(f"record_cls must be a protobuf Message subclass, got {record_cls!r}")
        super().__init__(
            record_cls,
            SchemaType.PROTOBUF_NATIVE,
            protobuf_native_definition(record_cls.DESCRIPTOR),
            "PROTOBUF_NATIVE",
        )

    def encode(self, obj: M) -> bytes:
        self._validate_object_type(obj)
        return obj.SerializeToString()

    def decode(self, data: bytes) -> M:
        return self._record_cls.FromString(data if isinstance(data, bytes) else bytes(data))

    def __str__(self) -> str:
        return f"ProtobufNativeSchema({self._record_cls.__name__})"
