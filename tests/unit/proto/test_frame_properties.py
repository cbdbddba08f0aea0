"""Property tests of the frame codec: round trips and robustness to garbage."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings, strategies as st

from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.errors import ChecksumMismatch, ProtocolError
from magnetar.proto.frames import Frame, FrameDecoder, encode
from tests.support.proto_strategies import (
    BODY_TYPES,
    FrameCase,
    badly_typed_field,
    frames,
    split_at,
)

T = pb.BaseCommand
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
chunk_sizes = st.lists(st.integers(1, 48), max_size=8)


def _decode_all(chunks: list[bytes]) -> list[Frame]:
    decoder = FrameDecoder()
    out: list[Frame] = []
    for chunk in chunks:
        decoder.feed(chunk)
        out.extend(decoder)
    assert decoder.buffered == 0
    return out


@FAST
@given(case=frames(), sizes=chunk_sizes)
def test_every_frame_kind_round_trips_in_any_chunking(case: FrameCase, sizes: list[int]) -> None:
    (frame,) = _decode_all(split_at(case.data, sizes))
    assert frame.command == case.command
    assert frame.type == case.command.type
    body_field = pb.BaseCommand.DESCRIPTOR.fields_by_number[case.command.type].name
    assert frame.body == getattr(case.command, body_field)
    assert encode(frame) == case.data
    if case.metadata is None:
        assert frame.payload is None
        return
    assert frame.payload is not None
    assert frame.payload.metadata == case.metadata
    assert frame.payload.payload == case.payload
    assert frame.payload.broker_entry_metadata == case.broker_entry_metadata


@settings(max_examples=40, deadline=None)
@given(cases=st.lists(frames(), min_size=2, max_size=6), sizes=chunk_sizes)
def test_frame_sequences_decode_in_order(cases: list[FrameCase], sizes: list[int]) -> None:
    stream = b"".join(case.data for case in cases)
    decoded = _decode_all(split_at(stream, sizes))
    assert [f.command for f in decoded] == [case.command for case in cases]


def test_strategy_covers_every_body_type() -> None:
    """The round trip above draws from all command types that have a body."""
    assert len(BODY_TYPES) == 43
    assert {T.CONNECT, T.SEND, T.MESSAGE, T.GET_OR_CREATE_SCHEMA_RESPONSE} <= set(BODY_TYPES)
    assert {T.WATCH_TOPIC_LIST, T.WATCH_TOPIC_UPDATE} <= set(BODY_TYPES)


def _check_decodes_safely(data: bytes, sizes: list[int]) -> None:
    """Garbage gives ProtocolError or well-formed frames, never another exception."""
    decoder = FrameDecoder(max_frame_size=4096)
    for chunk in split_at(data, sizes):
        decoder.feed(chunk)
        while True:
            try:
                frame = decoder.next_frame()
            except ChecksumMismatch as exc:
                assert isinstance(exc.frame, Frame)
                continue  # the stream is still in sync
            except ProtocolError:
                return
            if frame is None:
                break
            assert badly_typed_field(frame.command) is None
            assert frame.name
            frame.body.ListFields()
            if frame.payload is not None:
                try:
                    metadata = frame.payload.metadata
                except ProtocolError:
                    continue
                assert badly_typed_field(metadata) is None


@settings(max_examples=300, deadline=None)
@given(
    case=frames(),
    flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=4),
    sizes=chunk_sizes,
)
def test_mutated_frames_never_raise_other_errors(
    case: FrameCase, flips: list[tuple[int, int]], sizes: list[int]
) -> None:
    data = bytearray(case.data)
    for position, value in flips:
        data[position % len(data)] = value
    _check_decodes_safely(bytes(data), sizes)


@settings(max_examples=150, deadline=None)
@given(case=frames(), cut=st.integers(0, 10_000), sizes=chunk_sizes)
def test_truncated_frames_never_raise_other_errors(
    case: FrameCase, cut: int, sizes: list[int]
) -> None:
    data = case.data[: cut % len(case.data)]
    # A truncated frame inside a stream: the next frame's bytes follow it.
    _check_decodes_safely(data + case.data, sizes)


@settings(max_examples=100, deadline=None)
@given(data=st.binary(max_size=256), sizes=chunk_sizes)
def test_random_bytes_never_raise_other_errors(data: bytes, sizes: list[int]) -> None:
    _check_decodes_safely(data, sizes)


@FAST
@given(cases=st.lists(frames(), min_size=1, max_size=4), cut=st.integers(0, 400))
def test_any_buffer_type_decodes_alike(cases: list[FrameCase], cut: int) -> None:
    """Whole frames are parsed straight from the bytes fed; a partial one is
    kept and joined with what follows, whatever type the pieces have."""
    data = b"".join(c.data for c in cases)
    cut = min(cut, len(data))
    decoder = FrameDecoder()
    out: list[Frame] = []
    for piece in (memoryview(data)[:cut], bytearray(data[cut:])):
        decoder.feed(piece)
        out.extend(decoder)
    assert decoder.buffered == 0
    assert [f.command for f in out] == [c.command for c in cases]
