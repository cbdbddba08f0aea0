"""Batch payloads and message metadata helpers (proto/messages.py)."""

from __future__ import annotations

import base64
import struct

import pytest
from hypothesis import given, settings, strategies as st

from magnetar.proto import messages, pulsar_api_pb2 as pb
from magnetar.proto.errors import ProtocolError
from tests.support.proto_strategies import messages as messages_of


def _meta(**fields: object) -> pb.MessageMetadata:
    return pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1, **fields)  # type: ignore[arg-type]


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(messages_of(pb.SingleMessageMetadata), st.binary(max_size=40)), max_size=8)
)
def test_build_then_split_round_trips(
    parts: list[tuple[pb.SingleMessageMetadata, bytes]],
) -> None:
    body = messages.build_batch(parts)
    split = messages.split_batch(body, len(parts))
    assert [payload for _, payload in split] == [payload for _, payload in parts]
    for (meta, payload), (got, _) in zip(parts, split, strict=True):
        expected = pb.SingleMessageMetadata()
        expected.CopyFrom(meta)
        expected.payload_size = len(payload)
        assert got == expected
    assert messages.build_batch(split) == body


def test_build_batch_does_not_change_callers_metadata() -> None:
    meta = pb.SingleMessageMetadata(payload_size=99, partition_key="k")
    body = messages.build_batch([(meta, b"abc")])
    assert meta.payload_size == 99
    ((got, payload),) = messages.split_batch(body, 1)
    assert (got.payload_size, got.partition_key, payload) == (3, "k", b"abc")


def test_batch_layout_is_size_metadata_payload() -> None:
    meta = messages.single_metadata(b"xyz", props={"a": "1"})
    raw = meta.SerializeToString()
    assert messages.build_batch([(meta, b"xyz")]) == struct.pack(">I", len(raw)) + raw + b"xyz"


def _valid_batch() -> bytes:
    return messages.build_batch(
        [(messages.single_metadata(p, partition_key="k"), p) for p in (b"one", b"", b"three")]
    )


@pytest.mark.parametrize(
    ("data", "count", "error"),
    [
        pytest.param(_valid_batch(), 4, "no size field", id="too-few-messages"),
        pytest.param(_valid_batch(), 2, "trailing bytes", id="too-many-bytes"),
        pytest.param(_valid_batch()[:-1], 3, "does not fit", id="payload-truncated"),
        pytest.param(_valid_batch()[:2], 1, "no size field", id="size-truncated"),
        pytest.param(b"\x00\x00\x10\x00abc", 1, "exceeds", id="metadata-size-too-big"),
        pytest.param(b"\x00\x00\x00\x02\xff\xff", 1, "undecodable", id="garbage-metadata"),
        pytest.param(b"\x00\x00\x00\x02\x28\x01", 1, "without payload_size", id="no-payload-size"),
        pytest.param(
            b"\x00\x00\x00\x0b\x18\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",
            1,
            "payload size -1",
            id="negative-payload-size",
        ),
        pytest.param(
            b"\x00\x00\x00\x06\x12\x02\xc3\x28\x18\x00",
            1,
            "undecodable",
            id="partition-key-not-utf8",
        ),
        pytest.param(b"", -1, "negative", id="negative-count"),
    ],
)
def test_malformed_batches_raise_protocol_error(data: bytes, count: int, error: str) -> None:
    with pytest.raises(ProtocolError, match=error):
        messages.split_batch(data, count)


@settings(max_examples=200, deadline=None)
@given(
    data=st.binary(max_size=64) | st.just(_valid_batch()),
    count=st.integers(0, 5),
    cut=st.integers(0, 64),
    flip=st.tuples(st.integers(0, 63), st.integers(0, 255)),
)
def test_garbage_batches_raise_only_protocol_error(
    data: bytes, count: int, cut: int, flip: tuple[int, int]
) -> None:
    mutated = bytearray(data[: max(cut, len(data) // 2)])
    if mutated:
        mutated[flip[0] % len(mutated)] = flip[1]
    try:
        parts = messages.split_batch(bytes(mutated), count)
    except ProtocolError:
        return
    assert len(parts) == count


def test_empty_batch_and_zero_length_payloads() -> None:
    assert messages.split_batch(b"", 0) == []
    body = messages.build_batch([(messages.single_metadata(b""), b"")] * 3)
    assert [p for _, p in messages.split_batch(body, 3)] == [b"", b"", b""]


def test_is_batch_means_the_field_is_present() -> None:
    """WIRE: the presence of num_messages_in_batch, not its value, marks a batch."""
    plain = _meta()
    assert not messages.is_batch(plain)
    assert messages.message_count(plain) == 1
    one = _meta(num_messages_in_batch=1)
    assert messages.is_batch(one)
    assert messages.message_count(one) == 1
    assert messages.message_count(_meta(num_messages_in_batch=10)) == 10


def test_entry_messages() -> None:
    assert messages.entry_messages(_meta(), b"raw") == [(None, b"raw")]
    body = _valid_batch()
    parts = messages.entry_messages(_meta(num_messages_in_batch=3), body)
    assert [p for _, p in parts] == [b"one", b"", b"three"]


def test_sticky_key_prefers_ordering_key_then_partition_key() -> None:
    """SEM-4.4: ordering key if set, else partition key, else the fixed NON_KEY."""
    assert messages.sticky_key(_meta()) == messages.NON_KEY == b"NONE_KEY"
    assert messages.sticky_key(_meta(partition_key="pk")) == b"pk"
    assert messages.sticky_key(_meta(partition_key="pk", ordering_key=b"ok")) == b"ok"
    assert messages.sticky_key(_meta(ordering_key=b"")) == b""
    encoded = base64.b64encode(b"\x00\xffbin").decode()
    assert (
        messages.sticky_key(_meta(partition_key=encoded, partition_key_b64_encoded=True))
        == b"\x00\xffbin"
    )
    assert messages.sticky_key(pb.SingleMessageMetadata(payload_size=0, partition_key="s")) == b"s"
    assert messages.sticky_key(_meta(partition_key="x", null_partition_key=True)) == b"NONE_KEY"


def test_sticky_key_of_bad_base64_falls_back_to_the_text() -> None:
    meta = _meta(partition_key="not base64!", partition_key_b64_encoded=True)
    assert messages.sticky_key(meta) == b"not base64!"


def test_metadata_accessors() -> None:
    meta = _meta(
        event_time=0,
        properties=messages.key_values({"b": "2", "a": "1"}),
        deliver_at_time=1234,
    )
    assert messages.publish_time(meta) == 1
    assert messages.event_time(meta) is None
    assert messages.event_time(_meta(event_time=55)) == 55
    assert messages.properties(meta) == {"a": "1", "b": "2"}
    assert [kv.key for kv in meta.properties] == ["a", "b"]
    assert messages.deliver_at_time(meta) == 1234
    assert messages.deliver_at_time(_meta()) is None
    assert messages.partition_key(_meta()) is None
    assert messages.ordering_key(_meta(ordering_key=b"o")) == b"o"
    assert messages.ordering_key(_meta()) is None


def test_is_chunk() -> None:
    assert not messages.is_chunk(_meta())
    assert messages.is_chunk(_meta(uuid="u", chunk_id=0, num_chunks_from_msg=3))
    assert not messages.is_chunk(_meta(chunk_id=0, num_chunks_from_msg=1))


def test_single_metadata_sets_only_what_is_given() -> None:
    meta = messages.single_metadata(b"abcd")
    assert meta == pb.SingleMessageMetadata(payload_size=4)
    full = messages.single_metadata(
        b"ab",
        props={"k": "v"},
        partition_key="pk",
        ordering_key=b"ok",
        event_time=9,
        sequence_id=3,
        null_value=True,
    )
    assert messages.properties(full) == {"k": "v"}
    assert (full.partition_key, full.ordering_key, full.event_time) == ("pk", b"ok", 9)
    assert (full.sequence_id, full.null_value, full.payload_size) == (3, True, 2)
