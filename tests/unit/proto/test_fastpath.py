"""The hand-encoded SEND_RECEIPT and MESSAGE frames are byte for byte what
protobuf serializes for the same values, and decode back to them."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from magnetar.proto import fastpath, pulsar_api_pb2 as pb
from magnetar.proto.frames import FrameDecoder, encode_command, encode_payload_command, wrap

U64 = st.integers(0, 2**64 - 1)
PARTITION = st.integers(-1, 2**31 - 1)
FAST = settings(max_examples=300, deadline=None)


def _receipt_by_protobuf(
    producer_id: int, sequence_id: int, highest: int, ledger_id: int, entry_id: int, partition: int
) -> bytes:
    receipt = pb.CommandSendReceipt(producer_id=producer_id, sequence_id=sequence_id)
    if highest:
        receipt.highest_sequence_id = highest
    receipt.message_id.ledgerId = ledger_id
    receipt.message_id.entryId = entry_id
    if partition >= 0:
        receipt.message_id.partition = partition
    return encode_command(wrap(receipt))


@FAST
@given(U64, U64, U64, U64, U64, PARTITION)
def test_send_receipt_matches_protobuf(
    producer_id: int, sequence_id: int, highest: int, ledger_id: int, entry_id: int, partition: int
) -> None:
    frame = fastpath.send_receipt(producer_id, sequence_id, highest, ledger_id, entry_id, partition)
    assert frame == _receipt_by_protobuf(
        producer_id, sequence_id, highest, ledger_id, entry_id, partition
    )


def test_duplicate_receipt_carries_minus_one_as_unsigned() -> None:
    """WIRE 5: a dropped duplicate's receipt names (-1, -1)."""
    frame = fastpath.send_receipt(1, 7, 0, -1, -1, -1)
    decoder = FrameDecoder()
    decoder.feed(frame)
    (decoded,) = list(decoder)
    mid = decoded.command.send_receipt.message_id
    assert (mid.ledgerId, mid.entryId) == (2**64 - 1, 2**64 - 1)
    assert frame == _receipt_by_protobuf(1, 7, 0, 2**64 - 1, 2**64 - 1, -1)


@FAST
@given(
    consumer_id=U64,
    ledger_id=U64,
    entry_id=U64,
    partition=PARTITION,
    redelivery_count=st.integers(0, 2**32 - 1),
    ack_set=st.none() | st.lists(st.integers(-(2**63), 2**63 - 1), max_size=3),
    epoch=st.none() | U64,
    data=st.binary(max_size=64),
)
def test_message_matches_protobuf(
    consumer_id: int,
    ledger_id: int,
    entry_id: int,
    partition: int,
    redelivery_count: int,
    ack_set: list[int] | None,
    epoch: int | None,
    data: bytes,
) -> None:
    head, body = fastpath.message_parts(
        consumer_id, ledger_id, entry_id, partition, redelivery_count, ack_set, epoch, data
    )
    message = pb.CommandMessage(consumer_id=consumer_id)
    message.message_id.ledgerId = ledger_id
    message.message_id.entryId = entry_id
    if partition >= 0:
        message.message_id.partition = partition
    if redelivery_count:
        message.redelivery_count = redelivery_count
    if ack_set:
        message.ack_set.extend(ack_set)
    if epoch is not None:
        message.consumer_epoch = epoch
    assert body is data
    assert head + body == encode_payload_command(wrap(message), data)


@FAST
@given(st.integers(-(2**63), 2**64 - 1))
def test_varint_matches_protobuf(value: int) -> None:
    expected = pb.MessageIdData(ledgerId=value % 2**64, entryId=0).SerializeToString()
    assert b"\x08" + fastpath.varint(value) + b"\x10\x00" == expected
