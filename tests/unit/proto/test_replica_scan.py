"""Issue 45: a geo-replicator's entries and receipts read without protobuf
(proto/replica_scan.py), and its SEND frames written by hand
(proto/fastpath.send_frame).

The scan must give exactly what the protobuf path gives (parse the
metadata, set replicated_from and the sequence ids, serialize), byte for
byte, and leave to protobuf every shape it does not handle; checked for the
module as Python and (where the build made it) compiled."""

from __future__ import annotations

import struct
from collections.abc import Callable
from types import ModuleType

import pytest
from hypothesis import given, settings, strategies as st

from magnetar.proto import compiled, fastpath, pulsar_api_pb2 as pb, replica_scan
from magnetar.proto.frames import (
    REPLICA_SCAN_COMPILED,
    Frame,
    FrameDecoder,
    Payload,
    encode_command,
    encode_payload_command,
    wrap,
)
from magnetar.proto.replica_scan import Receipt, ReplicaHead

_SOURCE = compiled.from_source(replica_scan)
MODULES: dict[str, ModuleType] = {"Python": _SOURCE, "compiled": replica_scan}
U64 = st.integers(0, 2**64 - 1)
FAST = settings(max_examples=200, deadline=None)
PROPERTIES = st.lists(st.tuples(st.text(max_size=8), st.text(max_size=8)), max_size=3)


@pytest.fixture(params=list(MODULES))
def module(request: pytest.FixtureRequest) -> ModuleType:
    if request.param == "compiled" and not REPLICA_SCAN_COMPILED:
        pytest.skip("replica_scan is not compiled in this environment")
    return MODULES[request.param]


def _by_protobuf(data: bytes, cluster: str, sequence: int) -> bytes:
    """The metadata the replicator's protobuf path sends for `data`."""
    metadata = Payload.parse(data).metadata
    metadata.replicated_from = cluster
    metadata.sequence_id = sequence
    if metadata.HasField("highest_sequence_id"):
        metadata.highest_sequence_id = sequence
    return metadata.SerializeToString()


def _metadata(**fields: object) -> pb.MessageMetadata:
    metadata = pb.MessageMetadata(producer_name="p-1", sequence_id=5, publish_time=1_700_000)
    for name, value in fields.items():
        if name == "properties":
            for key, val in value:  # type: ignore[attr-defined]
                metadata.properties.add(key=key, value=val)
        elif name == "replicate_to":
            metadata.replicate_to.extend(value)  # type: ignore[arg-type]
        else:
            setattr(metadata, name, value)
    return metadata


SHAPES: dict[str, pb.MessageMetadata] = {
    "plain": _metadata(),
    "keyed, with properties": _metadata(
        partition_key="k", ordering_key=b"o", properties=[("a", "1"), ("b", "")]
    ),
    "batched, compressed": _metadata(
        num_messages_in_batch=10, compression=pb.LZ4, uncompressed_size=4000
    ),
    "highest sequence id, event time": _metadata(highest_sequence_id=9, event_time=77),
    "chunk": _metadata(uuid="u", num_chunks_from_msg=3, chunk_id=1, total_chunk_msg_size=9),
    "null value, marker type": _metadata(null_value=True, marker_type=12),
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_rewrite_matches_protobuf(module: ModuleType, shape: str) -> None:
    data = Payload.build(SHAPES[shape], b"body").data
    sequence = (3 << 32) | 17
    head: ReplicaHead | None = module.scan_entry(data, b"east", sequence)
    assert head is not None and not head.replicated
    assert head.metadata == _by_protobuf(data, "east", sequence)
    assert head.publish_time == 1_700_000
    assert data[head.payload_start :] == b"body"


@FAST
@given(
    sequence_id=U64,
    publish_time=U64,
    highest=st.none() | U64,
    key=st.none() | st.text(max_size=20),
    properties=PROPERTIES,
    sequence=U64,
    cluster=st.text(min_size=1, max_size=12),
    body=st.binary(max_size=40),
)
def test_rewrite_matches_protobuf_for_any_values(
    sequence_id: int,
    publish_time: int,
    highest: int | None,
    key: str | None,
    properties: list[tuple[str, str]],
    sequence: int,
    cluster: str,
    body: bytes,
) -> None:
    metadata = pb.MessageMetadata(
        producer_name="p", sequence_id=sequence_id, publish_time=publish_time
    )
    if highest is not None:
        metadata.highest_sequence_id = highest
    if key is not None:
        metadata.partition_key = key
    for k, v in properties:
        metadata.properties.add(key=k, value=v)
    data = Payload.build(metadata, body).data
    for module in MODULES.values():
        if module is replica_scan and not REPLICA_SCAN_COMPILED:
            continue
        head = module.scan_entry(data, cluster.encode(), sequence)
        assert head is not None
        assert head.metadata == _by_protobuf(data, cluster, sequence)
        assert head.publish_time == publish_time


def test_an_entry_from_another_cluster_is_reported_not_rewritten(module: ModuleType) -> None:
    data = Payload.build(_metadata(replicated_from="west"), b"x").data
    head = module.scan_entry(data, b"east", 1)
    assert head is not None and head.replicated and head.metadata == b""


def _raw(metadata: bytes, body: bytes = b"x") -> bytes:
    return Payload.build(metadata, body).data


REFUSED: dict[str, bytes] = {
    "replicate_to": _raw(_metadata(replicate_to=["b"]).SerializeToString()),
    "schema version": _raw(_metadata(schema_version=b"\x00" * 8).SerializeToString()),
    "empty replicated_from": _raw(_metadata(replicated_from="").SerializeToString()),
    "no checksum block": b"\x00\x00\x00\x03" + b"\x0a\x01p" + b"x",
    "metadata past the end": _raw(_metadata().SerializeToString())[:12],
    "truncated varint": _raw(_metadata().SerializeToString() + b"\x40\xff"),
    "a fixed64 field": _raw(_metadata().SerializeToString() + b"\x41" + bytes(8)),
    "no publish_time": _raw(
        pb.MessageMetadata(producer_name="p", sequence_id=1).SerializePartialToString()
    ),
    "too short": b"\x0e\x01\x00",
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_other_shapes_are_left_to_protobuf(module: ModuleType, case: str) -> None:
    assert module.scan_entry(REFUSED[case], b"east", 1) is None


Scan = Callable[[bytes, int, int, int], "Receipt | None"]


def _receipt_scan(module: ModuleType, frame: bytes) -> Receipt | None:
    cmd_size = int.from_bytes(frame[4:8], "big")
    scan: Scan = module.scan_receipt
    return scan(frame, 8, 8 + cmd_size, len(frame))


@FAST
@given(U64, U64, U64, st.integers(0, 2**40), st.integers(0, 2**40), st.integers(-1, 100))
def test_receipts_read_as_protobuf_reads_them(
    producer_id: int, sequence_id: int, highest: int, ledger_id: int, entry_id: int, partition: int
) -> None:
    frame = fastpath.send_receipt(producer_id, sequence_id, highest, ledger_id, entry_id, partition)
    for module in MODULES.values():
        if module is replica_scan and not REPLICA_SCAN_COMPILED:
            continue
        receipt = _receipt_scan(module, frame)
        assert receipt is not None
        assert (receipt.producer_id, receipt.sequence_id) == (producer_id, sequence_id)


def _raw_receipt(body: bytes) -> bytes:
    """A SEND_RECEIPT frame around a CommandSendReceipt body written by hand."""
    command = b"\x08\x07\x3a" + bytes([len(body)]) + body
    return struct.pack(">II", len(command) + 4, len(command)) + command


def test_other_frames_are_not_receipts(module: ModuleType) -> None:
    send = encode_payload_command(
        pb.BaseCommand(type=pb.BaseCommand.SEND, send=pb.CommandSend(producer_id=1, sequence_id=2)),
        Payload.build(_metadata(), b"x"),
    )
    ping = encode_command(wrap(pb.CommandPing()))
    # A receipt with a field 9 (varint) protobuf would skip: protobuf decides.
    assert _receipt_scan(module, _raw_receipt(b"\x08\x01\x10\x02\x48\x01")) is None
    assert _receipt_scan(module, send) is None
    assert _receipt_scan(module, ping) is None
    # producer_id alone: the required sequence_id is missing.
    assert _receipt_scan(module, _raw_receipt(b"\x08\x01")) is None


def test_the_decoder_hands_out_receipts_among_frames() -> None:
    """A replicator's producer reads receipts as Receipts where the scan is
    compiled, anything else as frames, across split reads."""
    receipts = [fastpath.send_receipt(1, 1000 + i, 1000 + i, 4, i, -1) for i in range(3)]
    error = encode_command(
        wrap(pb.CommandSendError(producer_id=1, sequence_id=9, error=pb.UnknownError, message="no"))
    )
    stream = receipts[0] + error + receipts[1] + receipts[2]
    decoder = FrameDecoder()
    decoder.feed(stream[:30])
    got: list[Frame | Receipt] = []
    while (item := decoder.next_frame_or_receipt()) is not None:
        got.append(item)
    decoder.feed(stream[30:])
    while (item := decoder.next_frame_or_receipt()) is not None:
        got.append(item)
    sequences = [
        item.sequence_id if isinstance(item, Receipt) else item.command.send_receipt.sequence_id
        for item in got
        if isinstance(item, Receipt) or item.type == pb.BaseCommand.SEND_RECEIPT
    ]
    assert sequences == [1000, 1001, 1002]
    kinds = [type(item) for item in got]
    assert kinds[1] is Frame and got[1].type == pb.BaseCommand.SEND_ERROR  # type: ignore[union-attr]
    assert (kinds.count(Receipt) == 3) == REPLICA_SCAN_COMPILED


@FAST
@given(U64, U64, st.integers(1, 2**31 - 1), U64, st.binary(max_size=30))
def test_send_frame_matches_protobuf(
    producer_id: int, sequence_id: int, messages: int, highest: int, body: bytes
) -> None:
    data = Payload.build(_metadata(), body).data
    command = pb.BaseCommand(
        type=pb.BaseCommand.SEND,
        send=pb.CommandSend(
            producer_id=producer_id,
            sequence_id=sequence_id,
            num_messages=messages,
            highest_sequence_id=highest,
        ),
    )
    assert fastpath.send_frame(
        producer_id, sequence_id, messages, highest, data
    ) == encode_payload_command(command, data)


def test_the_build_compiled_the_scan() -> None:
    """setup.py compiles replica_scan with mypyc: a build that fell back to
    Python would replicate every entry through protobuf again."""
    assert REPLICA_SCAN_COMPILED, (
        f"replica_scan was loaded from {replica_scan.__file__}: not compiled, or compiled "
        "from an older source (`make venv` rebuilds it)"
    )
