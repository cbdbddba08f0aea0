"""Checksums and the frame size limit of the decoder."""

from __future__ import annotations

import struct

import pytest

from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.errors import ChecksumMismatch, FrameTooLarge, ProtocolError
from magnetar.proto.frames import (
    Frame,
    FrameDecoder,
    Payload,
    encode_command,
    encode_payload_command,
    wrap,
)

T = pb.BaseCommand
METADATA = pb.MessageMetadata(producer_name="p", sequence_id=7, publish_time=1_700_000_000_000)


def _send_frame(payload: bytes = b"payload bytes") -> bytes:
    command = wrap(pb.CommandSend(producer_id=1, sequence_id=7, num_messages=1))
    return encode_payload_command(command, Payload.build(METADATA, payload))


def _ping() -> bytes:
    return encode_command(wrap(pb.CommandPing()))


def _partial_frame(command: pb.BaseCommand) -> bytes:
    """A frame around a command that lacks required fields (encode_command refuses those)."""
    raw = command.SerializePartialToString()
    return struct.pack(">II", len(raw) + 4, len(raw)) + raw


def test_flipped_payload_bit_raises_checksum_mismatch_with_the_frame() -> None:
    data = bytearray(_send_frame())
    data[-1] ^= 0x01
    decoder = FrameDecoder()
    decoder.feed(bytes(data) + _ping())
    with pytest.raises(ChecksumMismatch) as caught:
        decoder.next_frame()
    frame = caught.value.frame
    assert isinstance(frame, Frame)
    assert frame.command.send.sequence_id == 7
    assert frame.payload is not None and frame.payload.payload == b"payload byter"
    assert caught.value.expected != caught.value.actual
    # The frame was delimited correctly, so the stream stays usable.
    following = decoder.next_frame()
    assert following is not None and following.type == pb.BaseCommand.PING


@pytest.mark.parametrize("offset", [-20, -14, -1])
def test_any_flipped_bit_in_metadata_or_payload_is_detected(offset: int) -> None:
    data = bytearray(_send_frame())
    data[offset] ^= 0x40
    decoder = FrameDecoder()
    decoder.feed(bytes(data))
    with pytest.raises(ChecksumMismatch):
        decoder.next_frame()


def test_flipped_checksum_field_is_detected() -> None:
    data = bytearray(_send_frame())
    command_size = struct.unpack_from(">I", data, 4)[0]
    data[8 + command_size + 2] ^= 0x80  # first byte of the CRC32C itself
    decoder = FrameDecoder()
    decoder.feed(bytes(data))
    with pytest.raises(ChecksumMismatch):
        decoder.next_frame()


def test_checksum_verification_can_be_turned_off() -> None:
    data = bytearray(_send_frame())
    data[-1] ^= 0x01
    decoder = FrameDecoder(verify_checksum=False)
    decoder.feed(bytes(data))
    frame = decoder.next_frame()
    assert frame is not None and frame.payload is not None


def test_payload_parse_verifies_stored_checksums() -> None:
    stored = bytearray(Payload.build(METADATA, b"abc").data)
    assert Payload.parse(bytes(stored)).payload == b"abc"
    stored[-1] ^= 0x01
    with pytest.raises(ChecksumMismatch):
        Payload.parse(bytes(stored))


def test_frame_too_large_is_raised_from_the_size_prefix_alone() -> None:
    decoder = FrameDecoder(max_frame_size=1024)
    decoder.feed(struct.pack(">I", 1025))
    with pytest.raises(FrameTooLarge) as caught:
        decoder.next_frame()
    assert (caught.value.size, caught.value.limit) == (1025, 1024)
    # Nothing was buffered, nothing more is: the error is sticky.
    assert decoder.buffered == 0
    decoder.feed(b"\x00" * 4096)
    assert decoder.buffered == 0
    with pytest.raises(FrameTooLarge):
        decoder.next_frame()


def test_frame_at_the_limit_is_accepted_and_one_over_is_not() -> None:
    body = _send_frame(b"x" * 500)
    limit = len(body) - 4
    ok = FrameDecoder(max_frame_size=limit)
    ok.feed(body)
    assert ok.next_frame() is not None
    over = FrameDecoder(max_frame_size=limit - 1)
    over.feed(body[:4])
    with pytest.raises(FrameTooLarge):
        over.next_frame()


def test_partial_frame_waits_without_error() -> None:
    data = _send_frame()
    decoder = FrameDecoder()
    decoder.feed(data[:-1])
    assert decoder.next_frame() is None
    decoder.feed(data[-1:])
    assert decoder.next_frame() is not None
    assert decoder.buffered == 0


@pytest.mark.parametrize(
    ("data", "error"),
    [
        pytest.param(struct.pack(">II", 2, 0)[:6], "too small", id="total-below-4"),
        pytest.param(struct.pack(">II", 4, 0), "command size 0", id="empty-command"),
        pytest.param(struct.pack(">II", 5, 9) + b"\x08", "does not fit", id="command-overflows"),
        pytest.param(struct.pack(">II", 6, 2) + b"\x08\x7f", "type", id="unknown-type"),
        pytest.param(struct.pack(">II", 6, 2) + b"\x08\x32", "unsupported", id="txn-type"),
        pytest.param(struct.pack(">II", 6, 2) + b"\x08\x0d", "without its body", id="no-body"),
        pytest.param(
            _partial_frame(pb.BaseCommand(type=T.SUCCESS, success=pb.CommandSuccess())),
            "without required fields: success.request_id",
            id="missing-required",
        ),
        pytest.param(
            encode_command(wrap(pb.CommandPing())) + b"\x0e\x01",
            "PING must not carry a payload",
            id="payload-on-ping",
        ),
    ],
)
def test_malformed_frames_raise_protocol_error(data: bytes, error: str) -> None:
    if data[:4] != struct.pack(">I", len(data) - 4) and len(data) >= 8:
        # Keep the outer size consistent so the intended check is what fails.
        data = struct.pack(">I", len(data) - 4) + data[4:]
    decoder = FrameDecoder()
    decoder.feed(data)
    with pytest.raises(ProtocolError, match=error):
        decoder.next_frame()


def test_non_utf8_string_is_rejected() -> None:
    raw = wrap(pb.CommandError(request_id=1, error=pb.UnknownError, message="ab"))
    data = encode_command(raw).replace(b"ab", b"\xff\xfe")
    decoder = FrameDecoder()
    decoder.feed(data)
    with pytest.raises(ProtocolError, match="undecodable"):
        decoder.next_frame()
