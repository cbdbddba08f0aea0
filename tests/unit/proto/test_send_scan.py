"""Issue 48: SEND frames read without protobuf (proto/send_scan.py).

The scan may only accept what protobuf accepts, and must read the same
values: every case here is checked against protobuf's own decode, for the
module as Python and (where the build made it) compiled."""

from __future__ import annotations

import random
from collections.abc import Callable
from types import ModuleType

import pytest

from magnetar.proto import compiled, pulsar_api_pb2 as pb, send_scan
from magnetar.proto.errors import ChecksumMismatch, ProtocolError
from magnetar.proto.frames import (
    SEND_SCAN_COMPILED,
    Frame,
    FrameDecoder,
    Payload,
    encode_payload_command,
)
from magnetar.proto.messages import build_batch
from magnetar.proto.send_scan import SendHead

_SOURCE = compiled.from_source(send_scan)
MODULES: dict[str, ModuleType] = {"Python": _SOURCE, "compiled": send_scan}
Scan = Callable[[bytes, int, int, int], "SendHead | None"]


@pytest.fixture(params=list(MODULES))
def scan(request: pytest.FixtureRequest) -> Scan:
    if request.param == "compiled" and not SEND_SCAN_COMPILED:
        pytest.skip("send_scan is not compiled in this environment")
    fn: Scan = MODULES[request.param].scan_send
    return fn


def _frame(send: pb.CommandSend, metadata: pb.MessageMetadata | bytes, body: bytes) -> bytes:
    command = pb.BaseCommand(type=pb.BaseCommand.SEND, send=send)
    return encode_payload_command(command, Payload.build(metadata, body))


def _bounds(frame: bytes) -> tuple[int, int, int]:
    cmd_size = int.from_bytes(frame[4:8], "big")
    return 8, 8 + cmd_size, len(frame)


def _protobuf(frame: bytes) -> Frame | None:
    """protobuf's verdict: the decoded frame, or None when it is refused."""
    decoder = FrameDecoder()
    decoder.feed(frame)
    try:
        decoded = decoder.next_frame()
        assert decoded is not None and decoded.payload is not None
        assert decoded.payload.metadata.IsInitialized()  # parses and checks it
    except (ProtocolError, ChecksumMismatch):
        return None
    return decoded


def _assert_same(head: SendHead, frame: Frame) -> None:
    send = frame.command.send
    assert frame.payload is not None
    metadata = frame.payload.metadata
    assert (head.producer_id, head.sequence_id) == (send.producer_id, send.sequence_id)
    assert head.num_messages == send.num_messages
    assert head.highest_sequence_id == send.highest_sequence_id
    assert head.data == frame.payload.data
    assert head.checksum == frame.payload.checksum
    assert head.payload_start == frame.payload.meta_offset + frame.payload.meta_size
    has_count = metadata.HasField("num_messages_in_batch")
    assert head.batch_count == (metadata.num_messages_in_batch if has_count else -1)
    assert head.compression == metadata.compression
    assert head.uncompressed_size == metadata.uncompressed_size
    assert head.meta_highest_sequence_id == metadata.highest_sequence_id
    assert head.num_chunks == metadata.num_chunks_from_msg
    assert head.chunk_id == metadata.chunk_id


def _meta(**fields: object) -> pb.MessageMetadata:
    base: dict[str, object] = {"producer_name": "standalone-0-7", "sequence_id": 3,
                               "publish_time": 1_764_200_000_000}  # fmt: skip
    base.update(fields)
    return pb.MessageMetadata(**base)  # type: ignore[arg-type]


ACCEPTED = {
    "unbatched, as the official client sends": (pb.CommandSend(producer_id=0, sequence_id=3),
                                                _meta(uncompressed_size=100)),
    "batched": (pb.CommandSend(producer_id=2, sequence_id=10, num_messages=4,
                               highest_sequence_id=13),
                _meta(num_messages_in_batch=4, highest_sequence_id=13)),
    "a chunk": (pb.CommandSend(producer_id=1, sequence_id=5, is_chunk=True),
                _meta(uuid="p-5", num_chunks_from_msg=3, total_chunk_msg_size=900, chunk_id=1)),
    "every plain field": (pb.CommandSend(producer_id=1 << 40, sequence_id=1 << 50),
                          _meta(properties=[pb.KeyValue(key="k", value="v")], replicated_from="x",
                                partition_key="pk", replicate_to=["a", "b"], compression=pb.LZ4,
                                uncompressed_size=5000, event_time=9, encryption_algo="none",
                                encryption_param=b"\xff", schema_version=b"\x00\x01",
                                partition_key_b64_encoded=True, ordering_key=b"\x80",
                                deliver_at_time=123, marker_type=0, txnid_least_bits=1,
                                txnid_most_bits=2, null_value=True, null_partition_key=True)),
    "UTF-8 beyond ASCII": (pb.CommandSend(producer_id=1, sequence_id=1),
                           _meta(producer_name="prodücer", properties=[pb.KeyValue(key="ключ",
                                                                                    value="値")])),
}  # fmt: skip

REFUSED_BY_SCAN = {
    "encryption keys": (pb.CommandSend(producer_id=1, sequence_id=1),
                        _meta(encryption_keys=[pb.EncryptionKeys(key="k", value=b"v")])),
    "a transaction": (pb.CommandSend(producer_id=1, sequence_id=1, txnid_least_bits=4),
                      _meta()),
    "a marker": (pb.CommandSend(producer_id=1, sequence_id=1, marker=True), _meta()),
    "a message id": (pb.CommandSend(producer_id=1, sequence_id=1,
                                    message_id=pb.MessageIdData(ledgerId=1, entryId=2)), _meta()),
    "a negative count": (pb.CommandSend(producer_id=1, sequence_id=1, num_messages=-1), _meta()),
    "a negative deliver_at_time": (pb.CommandSend(producer_id=1, sequence_id=1),
                                   _meta(deliver_at_time=-5)),
}  # fmt: skip


@pytest.mark.parametrize("case", ACCEPTED)
def test_plain_sends_read_as_protobuf_reads_them(scan: Scan, case: str) -> None:
    send, metadata = ACCEPTED[case]
    frame = _frame(send, metadata, b"x" * 100)
    head = scan(frame, *_bounds(frame))
    assert head is not None
    reference = _protobuf(frame)
    assert reference is not None
    _assert_same(head, reference)


@pytest.mark.parametrize("case", REFUSED_BY_SCAN)
def test_other_shapes_are_left_to_protobuf(scan: Scan, case: str) -> None:
    send, metadata = REFUSED_BY_SCAN[case]
    frame = _frame(send, metadata, b"x" * 10)
    assert scan(frame, *_bounds(frame)) is None


def test_invalid_metadata_is_left_to_protobuf_which_refuses_it(scan: Scan) -> None:
    send = pb.CommandSend(producer_id=1, sequence_id=1)
    cases = {
        "no producer_name": _meta().SerializeToString()[len(b"\x0a\x0estandalone-0-7") :],
        "invalid UTF-8": b"\x0a\x02\xc3\x28" + _meta().SerializeToString()[16:],
        "a key without a value": _meta().SerializeToString() + b"\x22\x03\x0a\x01k",
        "a length past the end": _meta().SerializeToString() + b"\x2a\x7f",
        "an unknown compression": _meta().SerializeToString() + b"\x40\x09",
    }
    for name, raw in cases.items():
        frame = _frame(send, raw, b"x")
        assert scan(frame, *_bounds(frame)) is None, name
        if name != "an unknown compression":  # protobuf keeps that one as an unknown field
            assert _protobuf(frame) is None, name


def test_other_commands_are_not_sends(scan: Scan) -> None:
    message_id = pb.MessageIdData(ledgerId=1, entryId=1)
    body = pb.CommandMessage(consumer_id=1, message_id=message_id)
    command = pb.BaseCommand(type=pb.BaseCommand.MESSAGE, message=body)
    frame = encode_payload_command(command, Payload.build(_meta(), b"x"))
    assert scan(frame, *_bounds(frame)) is None


def test_damaged_frames_never_read_otherwise_than_protobuf(scan: Scan) -> None:
    """Random bytes changed anywhere in plain SENDs: the scan either hands
    the frame to protobuf or reads exactly what protobuf reads."""
    rng = random.Random(48)
    seeds = [_frame(send, metadata, b"y" * 20) for send, metadata in ACCEPTED.values()]
    batch = build_batch([(pb.SingleMessageMetadata(payload_size=3), b"abc")] * 3)
    seeds.append(_frame(pb.CommandSend(producer_id=1, sequence_id=1, num_messages=3),
                        _meta(num_messages_in_batch=3), batch))  # fmt: skip
    read = 0
    for _ in range(3000):
        frame = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 3)):
            frame[rng.randrange(8, len(frame))] = rng.randrange(256)
        data = bytes(frame)
        head = scan(data, *_bounds(data))
        if head is None:
            continue
        reference = _protobuf_unchecked(data)
        assert reference is not None, data.hex()
        _assert_same(head, reference)
        read += 1
    assert read > 100  # the damage often lands in the payload, which the scan does not read


def _protobuf_unchecked(frame: bytes) -> Frame | None:
    """protobuf's decode without the checksum (the scan leaves that to the decoder)."""
    decoder = FrameDecoder(verify_checksum=False)
    decoder.feed(frame)
    try:
        decoded = decoder.next_frame()
        assert decoded is not None and decoded.payload is not None
        assert decoded.payload.metadata.IsInitialized()
    except ProtocolError:
        return None
    return decoded


def test_the_broker_decoder_hands_out_heads_and_checks_their_checksum() -> None:
    if not SEND_SCAN_COMPILED:
        pytest.skip("send_scan is not compiled in this environment")
    good = _frame(*ACCEPTED["batched"], b"z" * 50)
    bad = bytearray(good)
    bad[-1] ^= 0xFF
    decoder = FrameDecoder(scan_sends=True)
    decoder.feed(good + bytes(bad) + good[:30])
    assert isinstance(decoder.next_frame_or_send(), SendHead)
    with pytest.raises(ChecksumMismatch) as caught:
        decoder.next_frame_or_send()
    assert isinstance(caught.value.frame, Frame)  # the SEND_ERROR names its sequence id
    assert decoder.next_frame_or_send() is None
    decoder.feed(good[30:])
    assert isinstance(decoder.next_frame_or_send(), SendHead)  # joined from two reads


def test_the_build_compiled_the_scan() -> None:
    """setup.py compiles send_scan with mypyc: a build that fell back to
    Python would read every SEND through protobuf again (issue 48)."""
    assert SEND_SCAN_COMPILED, (
        f"send_scan was loaded from {send_scan.__file__}: not compiled, or compiled from "
        "an older source (`make venv` rebuilds it)"
    )
