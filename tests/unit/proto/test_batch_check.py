"""Issue 28.2: the publish-time check of a batch's framing (proto/batch_check.py)."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from magnetar.proto import batch_walk, pulsar_api_pb2 as pb
from magnetar.proto.batch_check import (
    COMPILED_WALK,
    batch_framing_problem,
    send_problem,
    source_walk,
    strided_problem,
    walked_problem,
)
from magnetar.proto.messages import build_batch

_PYTHON_WALK = source_walk()
Check = Callable[[bytes, int], "str | None"]
# Every way the broker may check a batch: the pure-Python strided walk, and
# batch_walk's walk both as Python and (where the build made it) compiled.
CHECKS: dict[str, Check] = {
    "strided": strided_problem,
    "walk, Python": lambda body, n: walked_problem(body, n, 0, _PYTHON_WALK),
    "walk, compiled": lambda body, n: walked_problem(body, n, 0, batch_walk.walk),
}


def _meta(count: int | None, **fields: object) -> pb.MessageMetadata:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1, **fields)  # type: ignore[arg-type]
    if count is not None:
        metadata.num_messages_in_batch = count
    return metadata


SHAPES = [
    {"payload_size": 3},
    {"payload_size": 3, "sequence_id": 7},
    {"payload_size": 3, "sequence_id": 1 << 40},
    {"payload_size": 3, "partition_key": "k", "event_time": 9},
    {"payload_size": 3, "properties": [pb.KeyValue(key="a", value="b")], "ordering_key": b"o"},
]


def _check(name: str) -> Check:
    if name == "walk, compiled" and not COMPILED_WALK:
        pytest.skip("batch_walk is not compiled in this environment")
    return CHECKS[name]


@pytest.mark.parametrize("name", CHECKS)
@pytest.mark.parametrize("shape", SHAPES, ids=range(len(SHAPES)))
def test_well_formed_batches_pass(shape: dict[str, object], name: str) -> None:
    body = build_batch([(pb.SingleMessageMetadata(**shape), b"abc")] * 4)  # type: ignore[arg-type]
    assert _check(name)(body, 4) is None
    assert batch_framing_problem(body, 4) is None
    assert send_problem(_meta(4), b"head" + body, 4, 4) is None
    assert send_problem(_meta(4), b"head" + body, 4, 1) is None


def test_large_payload_sizes_take_the_parsed_path() -> None:
    body = build_batch(
        [(pb.SingleMessageMetadata(payload_size=1000, sequence_id=3), b"x" * 1000)] * 3
    )
    assert batch_framing_problem(body, 3) is None


@pytest.mark.parametrize("count", [1, 3, 5])
def test_wrong_counts_are_found(count: int) -> None:
    body = build_batch([(pb.SingleMessageMetadata(payload_size=2, sequence_id=1), b"ab")] * 4)
    assert batch_framing_problem(body, count) is not None
    assert send_problem(_meta(count), body, 0, count) is not None


def test_random_bytes_never_pass_as_a_larger_batch() -> None:
    rng = random.Random(28)
    for _ in range(2000):
        body = rng.randbytes(rng.randrange(0, 101))
        for count in (5, 1_000_000):
            assert send_problem(_meta(count), body, 0, 1) is not None


def test_a_later_payload_size_wins_as_protobuf_says() -> None:
    """A second payload_size field (last one wins for every parser) cannot
    smuggle a size past the walk."""
    first = pb.SingleMessageMetadata(payload_size=1).SerializeToString()
    second = pb.SingleMessageMetadata(payload_size=200).SerializeToString()
    meta = first + second
    body = len(meta).to_bytes(4, "big") + meta + b"x"
    assert batch_framing_problem(body, 1) is not None


def test_undecodable_single_metadata_is_found() -> None:
    body = (3).to_bytes(4, "big") + b"\xff\xff\xff" + b"x"
    assert batch_framing_problem(body, 1) is not None


def test_compressed_and_encrypted_batches_are_bounded_not_walked() -> None:
    compressed = _meta(10, compression=pb.LZ4, uncompressed_size=100)
    assert send_problem(compressed, b"opaque", 0, 10) is None
    assert send_problem(_meta(17, compression=pb.LZ4, uncompressed_size=100), b"z", 0, 1)
    encrypted = _meta(3, encryption_keys=[pb.EncryptionKeys(key="k", value=b"v")])
    assert send_problem(encrypted, b"c" * 40, 0, 3) is None
    assert send_problem(
        _meta(10, encryption_keys=[pb.EncryptionKeys(key="k", value=b"v")]), b"c" * 40, 0, 3
    )


def test_send_count_is_bounded_by_the_metadata() -> None:
    body = build_batch([(pb.SingleMessageMetadata(payload_size=1), b"x")] * 2)
    assert send_problem(_meta(2), body, 0, 3) is not None
    assert send_problem(_meta(2), body, 0, 0) is not None
    assert send_problem(_meta(None), b"plain", 0, 1) is None
    assert send_problem(_meta(None), b"plain", 0, 2) is not None
    assert send_problem(_meta(None, num_chunks_from_msg=3, chunk_id=0), b"chunk", 0, 1) is None


def _reference_problem(body: bytes, count: int) -> bool:
    """Whether `body` is not exactly `count` messages, by parsing every
    message's metadata in full (slow and plain: what the walk must agree with)."""
    offset = 0
    for _ in range(count):
        if len(body) - offset < 4:
            return True
        size = int.from_bytes(body[offset : offset + 4], "big")
        if offset + 4 + size > len(body):
            return True
        try:
            meta = pb.SingleMessageMetadata.FromString(body[offset + 4 : offset + 4 + size])
        except Exception:
            return True
        if not meta.HasField("payload_size"):
            return True
        offset += 4 + size + meta.payload_size
        if offset > len(body):
            return True
    return offset != len(body)


def _header_spans(body: bytes, count: int) -> list[tuple[int, int]]:
    spans = []
    offset = 0
    for _ in range(count):
        size = int.from_bytes(body[offset : offset + 4], "big")
        spans.append((offset, offset + 4 + size))
        meta = pb.SingleMessageMetadata.FromString(body[offset + 4 : offset + 4 + size])
        offset += 4 + size + meta.payload_size
    return spans


def _random_batch(rng: random.Random) -> tuple[bytes, int]:
    """A batch as the official clients write one (consecutive sequence ids,
    often across a varint length boundary, equal payloads), with now and then
    another shape or payload size in the middle."""
    count = rng.choice([1, 2, 9, 40, 300, 1000, 1500])
    start = rng.choice([0, 100, 16_300, 2_097_100, 1 << 40]) + rng.randrange(60)
    size = rng.choice([0, 1, 100, 127, 128, 300])
    messages = []
    for i in range(count):
        fields: dict[str, object] = {"payload_size": size, "sequence_id": start + i}
        odd = rng.random()
        if odd < 0.01:
            fields["partition_key"] = "k"
        elif odd < 0.02:
            fields["payload_size"] = size + 1
        elif odd < 0.03:
            del fields["sequence_id"]
        payload = bytes([i % 251]) * int(fields["payload_size"])  # type: ignore[call-overload]
        messages.append((pb.SingleMessageMetadata(**fields), payload))  # type: ignore[arg-type]
    return build_batch(messages), count


_TEXTS = ["", "k", "key-17", "clé", "ключ", "\U0001f511", "x" * 200]


def _raw_metadata(rng: random.Random, size: int, sequence_id: int) -> bytes:
    """One message's metadata in any shape a client may write (keys, properties,
    ordering keys, event times, flags), now and then with an unknown field, or
    a string that is not UTF-8, spliced into the bytes."""
    meta = pb.SingleMessageMetadata(payload_size=size, sequence_id=sequence_id)
    if rng.random() < 0.5:
        meta.partition_key = rng.choice(_TEXTS)
    if rng.random() < 0.3:
        for _ in range(rng.randrange(1, 4)):
            meta.properties.add(key=rng.choice(_TEXTS), value=rng.choice(_TEXTS))
    if rng.random() < 0.2:
        meta.ordering_key = rng.randbytes(rng.randrange(0, 9))
    if rng.random() < 0.2:
        meta.event_time = rng.choice([1, 1 << 41, (1 << 64) - 1])
    if rng.random() < 0.1:
        meta.null_value = True
    raw = meta.SerializeToString()
    odd = rng.random()
    if odd < 0.03:
        raw += bytes([0xA0, 0x01, rng.randrange(128)])  # field 20, varint: unknown
    elif odd < 0.06:
        raw += bytes([0x12, 2, 0xC3, 0x28])  # a partition_key that is not UTF-8
    elif odd < 0.08:
        raw += bytes([0x0A, 4, 0x0A, 2, 0xED, 0xA0])  # a property key: a lone surrogate
    return raw


def _varied_batch(rng: random.Random) -> tuple[bytes, int, list[tuple[int, int]]]:
    """A batch of messages in varied shapes and sizes, and each message's
    (size field, metadata) span."""
    count = rng.choice([1, 2, 9, 40, 300])
    start = rng.choice([0, 16_300, 1 << 40])
    parts = []
    spans = []
    offset = 0
    for i in range(count):
        size = rng.choice([0, 1, 100, 127, 128, rng.randrange(400)])
        raw = _raw_metadata(rng, size, start + i)
        parts += [len(raw).to_bytes(4, "big"), raw, bytes([i % 251]) * size]
        spans.append((offset, offset + 4 + len(raw)))
        offset += 4 + len(raw) + size
    return b"".join(parts), count, spans


@pytest.mark.parametrize("name", CHECKS)
def test_the_walk_agrees_with_a_full_parse(name: str) -> None:
    """SEM-28.2 in issue 28: each way of walking accepts exactly what parsing
    every message accepts, on well-formed batches and on ones with a byte
    changed, cut short, or miscounted."""
    check = _check(name)
    rng = random.Random(2028)
    for _ in range(400):
        body, count = _random_batch(rng)
        assert check(body, count) is None
        variants = [(body, count + 1), (body, count - 1), (body[:-1], count)]
        heads = _header_spans(body, count)
        for _ in range(6):
            broken = bytearray(body)
            start, stop = rng.choice(heads)  # a message's size field or metadata
            broken[rng.randrange(start, stop)] = rng.randrange(256)
            variants.append((bytes(broken), count))
        for data, n in variants:
            if n < 1:
                continue
            expected = _reference_problem(data, n)
            assert (check(data, n) is not None) == expected, (n, len(data))


@pytest.mark.parametrize("name", CHECKS)
def test_varied_shapes_agree_with_a_full_parse(name: str) -> None:
    """SEM-28.2: batches whose messages carry keys, properties, ordering keys,
    unknown fields, text that is or is not UTF-8, in payloads of any size: the
    walk and a full parse agree on every one, and on each with a byte changed."""
    check = _check(name)
    rng = random.Random(282)
    for _ in range(300):
        body, count, spans = _varied_batch(rng)
        assert (check(body, count) is not None) == _reference_problem(body, count)
        variants = [(body, count + 1), (body[:-1], count)]
        for _ in range(8):
            broken = bytearray(body)
            start, stop = rng.choice(spans)
            broken[rng.randrange(start, stop)] = rng.randrange(256)
            variants.append((bytes(broken), count))
        for data, n in variants:
            assert (check(data, n) is not None) == _reference_problem(data, n), (n, len(data))


def test_the_build_compiled_the_walk() -> None:
    """setup.py compiles batch_walk with mypyc (gcc and the Python headers are
    on every machine we build on): the broker walks batches in C here, and a
    build that silently fell back to Python would make batched produce of
    keyed or varied messages several times slower (README "Compiled hot path")."""
    assert COMPILED_WALK, (
        f"batch_walk was loaded from {batch_walk.__file__}: not compiled, or compiled "
        "from an older source (`make venv` rebuilds it)"
    )
