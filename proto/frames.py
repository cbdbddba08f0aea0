"""Sans-I/O codec for Pulsar binary protocol frames.

Wire layout (big-endian):

    simple:  [u32 total][u32 cmd_size][BaseCommand]
    payload: [u32 total][u32 cmd_size][BaseCommand]
             ([u16 0x0e02][u32 size][BrokerEntryMetadata])      MESSAGE only, optional
             [u16 0x0e01][u32 crc32c][u32 meta_size][MessageMetadata][payload]

`total` excludes its own four bytes. The CRC32C covers meta_size, metadata and
payload. Everything from the 0x0e01 magic on is the "headers and payload": the
broker stores those bytes as the entry and sends them back out untouched, so a
`Payload` keeps them as one buffer and parses the metadata only when asked.

Usage (h11 style): `decoder.feed(data)`, then `for frame in decoder: ...`;
`encode_command(cmd)` / `encode_payload_command(cmd, headers_and_payload)` give
bytes to write. Nothing here touches a socket.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from typing import NoReturn, TypeVar

import crc32c as _crc32c
from google.protobuf.message import DecodeError, Message

from magnetar.proto import compiled, pulsar_api_pb2 as pb, replica_scan, send_scan
from magnetar.proto.errors import ChecksumMismatch, FrameTooLarge, ProtocolError
from magnetar.proto.replica_scan import Receipt
from magnetar.proto.send_scan import SendHead

# True where the build compiled send_scan from its current source: only then
# is reading a SEND by hand faster than protobuf (see send_scan.py).
SEND_SCAN_COMPILED = compiled.is_current(send_scan)
# The same for replica_scan (a replicator's entries and receipts).
REPLICA_SCAN_COMPILED = compiled.is_current(replica_scan)
_Head = TypeVar("_Head", SendHead, Receipt)
# A partial frame up to this size is joined with the next read into new bytes
# (which the SEND scan reads); a larger one is gathered in a bytearray.
_JOIN_AS_BYTES = 256 * 1024

MAGIC_CHECKSUM = 0x0E01
MAGIC_BROKER_ENTRY_METADATA = 0x0E02

# Pulsar's default maximum message size; CONNECTED advertises it.
DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024
# Room for the command and metadata on top of a maximum-size message (WIRE 17).
FRAME_HEADROOM = 16 * 1024
DEFAULT_MAX_FRAME_SIZE = DEFAULT_MAX_MESSAGE_SIZE + FRAME_HEADROOM

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U32_PAIR = struct.Struct(">II")
_MAGIC_AND_U32 = struct.Struct(">HI")
# Magic, checksum and metadata size: how a checksummed payload section starts.
_PAYLOAD_HEAD = struct.Struct(">HII")

_T = pb.BaseCommand.Type
# BaseCommand carries its body in the field whose number equals the type value.
_FIELD_BY_TYPE: dict[int, str] = {
    value: pb.BaseCommand.DESCRIPTOR.fields_by_number[value].name
    for value in pb.BaseCommand.Type.values()
    if value in pb.BaseCommand.DESCRIPTOR.fields_by_number
}
_TYPE_BY_BODY: dict[str, tuple[int, str]] = {
    pb.BaseCommand.DESCRIPTOR.fields_by_name[name].message_type.full_name: (value, name)  # type: ignore[union-attr]
    for value, name in _FIELD_BY_TYPE.items()
}
_PAYLOAD_TYPES = frozenset({_T.SEND, _T.MESSAGE})
# Bodies that carry no fields: a peer may leave them out.
_EMPTY_BODY_TYPES = frozenset({_T.PING, _T.PONG})
# What BaseCommand.type reads as when it is missing (the enum's first value).
_UNSET_TYPE_READS_AS = pb.BaseCommand().type
_parse_command = pb.BaseCommand.FromString


def command_name(command_type: int) -> str:
    """The protocol name of a command type, for logs and errors."""
    try:
        return pb.BaseCommand.Type.Name(command_type)  # type: ignore[arg-type]
    except ValueError:
        return f"UNKNOWN({command_type})"


def _missing_fields(message: Message) -> str:
    """The required fields a parsed message lacks, for error messages."""
    errors: list[str] = message.FindInitializationErrors()  # type: ignore[attr-defined]
    return ", ".join(errors)


def wrap(body: Message) -> pb.BaseCommand:
    """Put a Command* message into a BaseCommand with the matching type."""
    try:
        command_type, field = _TYPE_BY_BODY[body.DESCRIPTOR.full_name]
    except KeyError:
        raise TypeError(f"{type(body).__name__} is not a BaseCommand body") from None
    command = pb.BaseCommand(type=command_type)  # type: ignore[arg-type]
    getattr(command, field).CopyFrom(body)
    return command


class Payload:
    """A message's "headers and payload": checksum block, metadata, payload bytes.

    `data` is exactly what the broker stores and forwards. Metadata is parsed on
    first use and cached, because the hot path usually does not need it.
    """

    __slots__ = (
        "_metadata",
        "broker_entry_metadata",
        "checksum",
        "data",
        "meta_offset",
        "meta_size",
    )

    def __init__(
        self,
        data: bytes,
        meta_offset: int,
        meta_size: int,
        checksum: int | None,
        broker_entry_metadata: pb.BrokerEntryMetadata | None = None,
    ) -> None:
        self.data = data
        self.meta_offset = meta_offset
        self.meta_size = meta_size
        self.checksum = checksum
        self.broker_entry_metadata = broker_entry_metadata
        self._metadata: pb.MessageMetadata | None = None

    @classmethod
    def parse(cls, data: bytes, *, verify_checksum: bool = True) -> Payload:
        """Split stored or received headers-and-payload bytes; raises ProtocolError."""
        view = memoryview(data)
        checksum: int | None = None
        offset = 0
        if len(data) >= 2 and _U16.unpack_from(data, 0)[0] == MAGIC_CHECKSUM:
            if len(data) < 6:
                raise ProtocolError("truncated checksum block")
            checksum = _U32.unpack_from(data, 2)[0]
            offset = 6
            if verify_checksum:
                actual = _crc32c.crc32c(view[6:])
                if actual != checksum:
                    raise ChecksumMismatch(checksum, actual, None)
        if len(data) - offset < 4:
            raise ProtocolError("payload section too short for the metadata size")
        meta_size = _U32.unpack_from(data, offset)[0]
        offset += 4
        if meta_size > len(data) - offset:
            raise ProtocolError(
                f"metadata size {meta_size} exceeds the {len(data) - offset} bytes left"
            )
        return cls(data, offset, meta_size, checksum)

    @classmethod
    def build(cls, metadata: pb.MessageMetadata | bytes, payload: bytes) -> Payload:
        """Checksummed headers and payload from metadata and payload bytes."""
        meta = metadata if isinstance(metadata, bytes) else metadata.SerializeToString()
        head = _U32.pack(len(meta))
        crc = _crc32c.crc32c(payload, _crc32c.crc32c(meta, _crc32c.crc32c(head)))
        data = b"".join((_MAGIC_AND_U32.pack(MAGIC_CHECKSUM, crc), head, meta, payload))
        payload_obj = cls(data, 10, len(meta), crc)
        if not isinstance(metadata, bytes):
            payload_obj._metadata = metadata
        return payload_obj

    @property
    def metadata_bytes(self) -> bytes:
        return self.data[self.meta_offset : self.meta_offset + self.meta_size]

    @property
    def metadata(self) -> pb.MessageMetadata:
        if self._metadata is None:
            try:
                metadata = pb.MessageMetadata.FromString(self.metadata_bytes)
            except DecodeError as exc:
                raise ProtocolError(f"undecodable message metadata: {exc}") from exc
            # upb parses proto2-style required fields without checking them.
            if not metadata.IsInitialized():
                raise ProtocolError(
                    f"message metadata without required fields: {_missing_fields(metadata)}"
                )
            self._metadata = metadata
        return self._metadata

    @property
    def payload(self) -> bytes:
        return self.data[self.meta_offset + self.meta_size :]

    def __repr__(self) -> str:
        return f"Payload({len(self.data)} bytes, metadata {self.meta_size} bytes)"


class Frame:
    """One decoded frame: the command and, for SEND and MESSAGE, its payload.

    A plain slotted class rather than a frozen dataclass: one is built per
    frame on the hot path, and the frozen __init__ cost three times as much.
    """

    __slots__ = ("command", "payload")

    def __init__(self, command: pb.BaseCommand, payload: Payload | None = None) -> None:
        self.command = command
        self.payload = payload

    @property
    def type(self) -> int:
        return self.command.type

    @property
    def name(self) -> str:
        return command_name(self.command.type)

    @property
    def body(self) -> Message:
        """The typed Command* sub-message this frame's type names."""
        field: str = _FIELD_BY_TYPE[self.command.type]
        body: Message = getattr(self.command, field)
        return body

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Frame):
            return NotImplemented
        return self.command == other.command and self.payload is other.payload

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Frame({self.name}, payload={self.payload!r})"


class FrameDecoder:
    """Incremental decoder: feed bytes, iterate complete frames.

    It holds at most one partial frame (bounded by `max_frame_size`) plus what
    the last feed brought. A ProtocolError is sticky: the stream is out of sync
    and the connection should be closed. ChecksumMismatch is the exception: the
    frame was delimited correctly, so decoding may continue after it.
    """

    def __init__(
        self,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        *,
        verify_checksum: bool = True,
        scan_sends: bool = False,
    ) -> None:
        self.max_frame_size = max_frame_size
        self.verify_checksum = verify_checksum
        # With scan_sends, a SEND of the plain shape comes out as a SendHead
        # read by send_scan instead of a Frame (the broker's receive path).
        self._scan = send_scan.scan_send if scan_sends else None
        # The bytes fed last while they hold whole frames (sliced without a
        # copy into a buffer first); a bytearray once a partial frame waits.
        self._buf: bytes | bytearray = b""
        self._pos = 0
        self._error: ProtocolError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received and not yet returned as frames."""
        return len(self._buf) - self._pos

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        if self._error is not None or not data:
            return
        buf = self._buf
        if self._pos >= len(buf):
            self._buf = data if type(data) is bytes else bytes(data)
            self._pos = 0
            return
        if type(buf) is bytes:
            if len(buf) - self._pos + len(data) <= _JOIN_AS_BYTES:
                self._buf = buf[self._pos :] + (data if type(data) is bytes else bytes(data))
                self._pos = 0
                return
            buf = bytearray(memoryview(buf)[self._pos :])
            self._pos = 0
        buf += data
        self._buf = buf

    def __iter__(self) -> Iterator[Frame]:
        while (frame := self.next_frame()) is not None:
            yield frame

    def next_frame(self) -> Frame | None:
        """The next complete frame, or None when more bytes are needed."""
        frame = self._next(None)
        assert not isinstance(frame, SendHead)
        return frame

    def next_frame_or_send(self) -> Frame | SendHead | None:
        """next_frame, except that with ``scan_sends`` a SEND of the plain
        shape comes out as a SendHead (the broker's receive path)."""
        return self._next(self._scan)

    def next_frame_or_receipt(self) -> Frame | Receipt | None:
        """next_frame, except that a SEND_RECEIPT of the plain shape comes out
        as a Receipt where replica_scan is compiled (a replicator's producer)."""
        return self._next(replica_scan.scan_receipt if REPLICA_SCAN_COMPILED else None)

    def _next(
        self, scan: Callable[[bytes, int, int, int], _Head | None] | None
    ) -> Frame | _Head | None:
        if self._error is not None:
            raise self._error
        buf = self._buf
        pos = self._pos
        available = len(buf) - pos
        if available < 4:
            self._compact()
            return None
        total = _U32.unpack_from(buf, pos)[0]
        if total > self.max_frame_size:
            self._fail(FrameTooLarge(total, self.max_frame_size))
        if available < 4 + total:
            self._compact()
            return None
        if total < 4:
            self._fail(ProtocolError(f"frame size {total} is too small for a command size field"))
        cmd_size = _U32.unpack_from(buf, pos + 4)[0]
        if cmd_size == 0 or cmd_size > total - 4:
            self._fail(
                ProtocolError(f"command size {cmd_size} does not fit in a frame of {total} bytes")
            )
        cmd_start = pos + 8
        cmd_end = cmd_start + cmd_size
        frame_end = pos + 4 + total
        self._pos = frame_end
        if scan is not None and type(buf) is bytes:
            head = scan(buf, cmd_start, cmd_end, frame_end)
            if (
                head is not None
                and (
                    not self.verify_checksum
                    or not isinstance(head, SendHead)  # a receipt has no payload
                    or _crc32c.crc32c(memoryview(buf)[cmd_end + 6 : frame_end]) == head.checksum
                )
            ):
                return head
            # Not the plain shape, or a bad checksum: protobuf decodes it
            # below and the mismatch is raised with the frame.
        if type(buf) is bytes:
            command = self._decode_command(buf[cmd_start:cmd_end])
        else:
            command = self._decode_command(bytes(memoryview(buf)[cmd_start:cmd_end]))
        if cmd_end == frame_end:
            return Frame(command)
        command_type = command.type
        if command_type not in _PAYLOAD_TYPES:
            self._fail(ProtocolError(f"{command_name(command_type)} must not carry a payload"))
        if type(buf) is bytes:
            data = buf[cmd_end:frame_end]
        else:
            data = bytes(memoryview(buf)[cmd_end:frame_end])
        payload = self._decode_payload(data, command_type)
        frame = Frame(command, payload)
        checksum = payload.checksum
        if self.verify_checksum and checksum is not None:
            with memoryview(payload.data) as view:
                actual = _crc32c.crc32c(view[6:])
            if actual != checksum:
                raise ChecksumMismatch(checksum, actual, frame)
        return frame

    def _decode_command(self, raw: bytes) -> pb.BaseCommand:
        try:
            command = _parse_command(raw)
        except (DecodeError, RuntimeError, ValueError) as exc:
            self._fail(ProtocolError(f"undecodable command: {exc}"))
        command_type = command.type
        # An enum value we do not know is parsed as "unset", which reads as
        # the first value, CONNECT: only then is the presence check needed.
        if command_type == _UNSET_TYPE_READS_AS and not command.HasField("type"):
            self._fail(ProtocolError("command without a type, or with a type we do not know"))
        field = _FIELD_BY_TYPE.get(command_type)
        if field is None:
            self._fail(ProtocolError(f"unsupported command type {command_type}"))
        if command_type not in _EMPTY_BODY_TYPES and not command.HasField(field):  # type: ignore[arg-type]
            self._fail(ProtocolError(f"{command_name(command_type)} command without its body"))
        # upb parses required fields without checking them; Pulsar's broker rejects such commands.
        if not command.IsInitialized():
            missing = _missing_fields(command)
            self._fail(
                ProtocolError(f"{command_name(command_type)} without required fields: {missing}")
            )
        return command

    def _decode_payload(self, data: bytes, command_type: int) -> Payload:
        if len(data) >= 10:
            magic, checksum, meta_size = _PAYLOAD_HEAD.unpack_from(data, 0)
            # The common shape first: checksum block, metadata, payload.
            if magic == MAGIC_CHECKSUM and meta_size <= len(data) - 10:
                return Payload(data, 10, meta_size, checksum)
        broker_entry_metadata: pb.BrokerEntryMetadata | None = None
        if len(data) >= 2 and _U16.unpack_from(data, 0)[0] == MAGIC_BROKER_ENTRY_METADATA:
            if command_type != _T.MESSAGE:
                self._fail(ProtocolError("broker entry metadata is only valid on MESSAGE"))
            if len(data) < 6:
                self._fail(ProtocolError("truncated broker entry metadata"))
            size = _U32.unpack_from(data, 2)[0]
            if size > len(data) - 6:
                self._fail(ProtocolError(f"broker entry metadata size {size} exceeds the frame"))
            try:
                broker_entry_metadata = pb.BrokerEntryMetadata.FromString(data[6 : 6 + size])
            except DecodeError as exc:
                self._fail(ProtocolError(f"undecodable broker entry metadata: {exc}"))
            data = data[6 + size :]
        try:
            payload = Payload.parse(data, verify_checksum=False)
        except ProtocolError as exc:
            self._fail(exc)
        payload.broker_entry_metadata = broker_entry_metadata
        return payload

    def _fail(self, error: ProtocolError) -> NoReturn:
        self._error = error
        self._buf = b""
        self._pos = 0
        raise error

    def _compact(self) -> None:
        # Drop consumed bytes so the buffer never grows beyond one partial frame.
        pos = self._pos
        if pos:
            buf = self._buf
            if isinstance(buf, bytearray):
                del buf[:pos]
            else:
                self._buf = buf[pos:]
            self._pos = 0


def encode_command(command: pb.BaseCommand) -> bytes:
    """A simple frame: size prefixes and the serialized command."""
    body = command.SerializeToString()
    return _U32_PAIR.pack(len(body) + 4, len(body)) + body


def encode_payload_command(
    command: pb.BaseCommand,
    headers_and_payload: bytes | Payload,
    broker_entry_metadata: pb.BrokerEntryMetadata | None = None,
) -> bytes:
    """A SEND or MESSAGE frame around already-built headers and payload bytes."""
    data = (
        headers_and_payload.data
        if isinstance(headers_and_payload, Payload)
        else headers_and_payload
    )
    body = command.SerializeToString()
    if broker_entry_metadata is None:
        prefix = b""
    else:
        raw = broker_entry_metadata.SerializeToString()
        prefix = _MAGIC_AND_U32.pack(MAGIC_BROKER_ENTRY_METADATA, len(raw)) + raw
    total = 4 + len(body) + len(prefix) + len(data)
    return b"".join((_U32_PAIR.pack(total, len(body)), body, prefix, data))


def encode(frame: Frame) -> bytes:
    """Bytes for a Frame (the inverse of FrameDecoder)."""
    if frame.payload is None:
        return encode_command(frame.command)
    return encode_payload_command(frame.command, frame.payload, frame.payload.broker_entry_metadata)
