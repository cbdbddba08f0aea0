"""Hypothesis strategies for wire messages and frames, built from the schema.

`messages(cls)` draws any valid instance of a generated protobuf class: every
required field set, optional ones sometimes, repeated ones 0-2 times, nested
messages to a bounded depth. `frames()` draws complete frames of every
BaseCommand type we have a body for, SEND and MESSAGE with payloads (MESSAGE
sometimes with broker entry metadata), as encoded bytes plus what they hold.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from hypothesis import strategies as st

from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.frames import Payload, encode_command, encode_payload_command, wrap

M = TypeVar("M", bound=Message)
T = pb.BaseCommand

# Command types that have a body field in our schema (the field number is the type).
BODY_TYPES: tuple[int, ...] = tuple(
    sorted(
        value
        for value in pb.BaseCommand.Type.values()
        if value in pb.BaseCommand.DESCRIPTOR.fields_by_number
    )
)
PAYLOAD_TYPES = frozenset({T.SEND, T.MESSAGE})

_INT_RANGES: dict[int, tuple[int, int]] = {
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SINT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SINT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
    FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
}


def _scalar(field: FieldDescriptor, depth: int) -> st.SearchStrategy[Any]:
    kind = field.type
    if kind in _INT_RANGES:
        low, high = _INT_RANGES[kind]
        return st.integers(low, high)
    if kind == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if kind == FieldDescriptor.TYPE_DOUBLE:
        return st.floats(allow_nan=False, allow_infinity=False)
    if kind == FieldDescriptor.TYPE_FLOAT:
        return st.floats(allow_nan=False, allow_infinity=False, width=32)
    if kind == FieldDescriptor.TYPE_STRING:
        return st.text(max_size=12)
    if kind == FieldDescriptor.TYPE_BYTES:
        return st.binary(max_size=16)
    if kind == FieldDescriptor.TYPE_ENUM:
        assert field.enum_type is not None
        return st.sampled_from([v.number for v in field.enum_type.values])
    if kind == FieldDescriptor.TYPE_MESSAGE:
        assert field.message_type is not None
        return _message(field.message_type, depth - 1)
    raise NotImplementedError(f"no strategy for field type {kind} ({field.full_name})")


def _message(descriptor: Descriptor, depth: int) -> st.SearchStrategy[Message]:
    cls: type[Message] = pb.__dict__[descriptor.name]
    required: dict[str, st.SearchStrategy[Any]] = {}
    optional: dict[str, st.SearchStrategy[Any]] = {}
    for field in descriptor.fields:
        nested = field.type == FieldDescriptor.TYPE_MESSAGE
        if field.is_required:
            required[field.name] = _scalar(field, depth)
        elif nested and depth <= 0:
            continue  # bound the recursion (MessageIdData nests itself)
        elif field.is_repeated:
            optional[field.name] = st.lists(_scalar(field, depth), max_size=2)
        else:
            optional[field.name] = _scalar(field, depth)
    return st.fixed_dictionaries(required, optional=optional).map(lambda kw: cls(**kw))


def messages(cls: type[M], depth: int = 2) -> st.SearchStrategy[M]:
    """Valid instances of a generated message class."""
    descriptor: Descriptor = cls.DESCRIPTOR  # type: ignore[assignment]
    strategy: st.SearchStrategy[M] = _message(descriptor, depth)  # type: ignore[assignment]
    return strategy


@dataclass(frozen=True)
class FrameCase:
    """A drawn frame: its bytes and the parts it was built from."""

    data: bytes
    command: pb.BaseCommand
    metadata: pb.MessageMetadata | None = None
    payload: bytes | None = None
    broker_entry_metadata: pb.BrokerEntryMetadata | None = None


@st.composite
def frames(draw: st.DrawFn, types: tuple[int, ...] = BODY_TYPES) -> FrameCase:
    command_type = draw(st.sampled_from(types))
    field = pb.BaseCommand.DESCRIPTOR.fields_by_number[command_type]
    assert field.message_type is not None
    body = draw(_message(field.message_type, 2))
    if command_type in (T.PING, T.PONG) and draw(st.booleans()):
        command = pb.BaseCommand(type=command_type)  # type: ignore[arg-type]
    else:
        command = wrap(body)
    if command_type not in PAYLOAD_TYPES:
        return FrameCase(encode_command(command), command)
    metadata = draw(messages(pb.MessageMetadata))
    payload = draw(st.binary(max_size=64))
    entry_meta = None
    if command_type == T.MESSAGE and draw(st.booleans()):
        entry_meta = draw(messages(pb.BrokerEntryMetadata))
    built = Payload.build(metadata, payload)
    return FrameCase(
        encode_payload_command(command, built, entry_meta), command, metadata, payload, entry_meta
    )


def split_at(data: bytes, sizes: list[int]) -> list[bytes]:
    """`data` cut into chunks of the given sizes (cycled), as a socket might deliver it."""
    chunks: list[bytes] = []
    pos = 0
    i = 0
    while pos < len(data):
        size = sizes[i % len(sizes)] if sizes else len(data)
        chunks.append(data[pos : pos + size])
        pos += size
        i += 1
    return chunks


def badly_typed_field(message: Message) -> str | None:
    """The first string field (recursively) that does not hold a str, if any."""
    for field, value in message.ListFields():
        values = list(value) if field.is_repeated else [value]
        if field.type == FieldDescriptor.TYPE_STRING:
            if not all(isinstance(v, str) for v in values):
                return field.full_name
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            for sub in values:
                found = badly_typed_field(sub)
                if found is not None:
                    return found
    return None
