"""MessageDecoder: MESSAGE frames into messages (batches split in one pass; no sockets)."""

from __future__ import annotations

from magnetar.client.aio.consumer.chunking import ChunkAssembler
from magnetar.client.aio.consumer.incoming import Decoded, MessageDecoder
from magnetar.proto import messages, pulsar_api_pb2 as pb
from magnetar.proto.frames import Frame, Payload, wrap
from magnetar.proto.ids import MessageId


def _decode(
    singles: list[tuple[pb.SingleMessageMetadata, bytes]],
    ack_set: list[int] | None = None,
    raw: bytes | None = None,
) -> Decoded:
    body = messages.build_batch(singles) if raw is None else raw
    meta = pb.MessageMetadata(
        producer_name="p", sequence_id=0, publish_time=5, num_messages_in_batch=len(singles)
    )
    command = pb.CommandMessage(
        consumer_id=1, message_id=pb.MessageIdData(ledgerId=7, entryId=3), redelivery_count=2
    )
    if ack_set is not None:
        command.ack_set.extend(ack_set)
    decoder = MessageDecoder("persistent://t/n/x", 4, ChunkAssembler())
    return decoder.decode(Frame(wrap(command), Payload.build(meta, body)))


def test_batch_messages_carry_their_own_metadata() -> None:
    """WIRE "Batch payload": each message keeps its SingleMessageMetadata fields,
    whichever way they are read (plain ones directly, the rest on first use)."""
    big = b"y" * 300  # a payload_size of two varint bytes
    singles = [
        (messages.single_metadata(b"a", sequence_id=1), b"a"),
        (messages.single_metadata(big, sequence_id=2, event_time=99), big),
        (messages.single_metadata(b"", props={"k": "v"}, partition_key="pk"), b""),
        (messages.single_metadata(b"d", ordering_key=b"ok", null_value=True), b"d"),
    ]
    decoded = _decode(singles)
    assert decoded.error is None and decoded.skipped == 0
    assert decoded.batch_indexes == {0, 1, 2, 3}
    assert decoded.size == 1 + 300 + 0 + 1
    first, second, third, fourth = decoded.messages
    assert [m.data() for m in decoded.messages] == [b"a", big, b"", b"d"]
    assert first.properties() == {} and first.partition_key() == "" and first.event_timestamp() == 0
    assert second.event_timestamp() == 99
    assert third.properties() == {"k": "v"} and third.partition_key() == "pk"
    assert fourth.ordering_key_bytes() == b"ok" and fourth.has_null_value()
    assert not first.has_null_value()
    assert second.message_id() == MessageId(7, 3, 4, 1, 4)
    assert second.topic_name() == "persistent://t/n/x"
    assert second.redelivery_count() == 2 and second.publish_timestamp() == 5
    assert second.producer_name() == "p"


def test_compacted_out_and_acked_indexes_are_skipped() -> None:
    """SEM-3.3 / WIRE 14: ack_set bits clear for acked indexes; compacted-out messages too."""
    compacted = messages.single_metadata(b"b", sequence_id=5)
    compacted.compacted_out = True
    singles = [
        (messages.single_metadata(b"a", sequence_id=4), b"a"),
        (compacted, b"b"),
        (messages.single_metadata(b"c", sequence_id=6), b"c"),
        (messages.single_metadata(b"d", sequence_id=7), b"d"),
    ]
    decoded = _decode(singles, ack_set=[0b0101])  # indexes 1 and 3 acked
    assert [m.data() for m in decoded.messages] == [b"a", b"c"]
    assert decoded.batch_indexes == {0, 2} and decoded.skipped == 2
    assert _decode(singles).skipped == 1  # compacted out, without an ack_set


def test_malformed_batches_are_refused_whole() -> None:
    """A batch whose framing does not hold its count of messages is one error,
    never a partial list (the consumer answers it with a validation ack)."""
    good = messages.build_batch([(messages.single_metadata(b"abc", sequence_id=1), b"abc")])
    singles = [(messages.single_metadata(b"abc", sequence_id=1), b"abc")] * 2
    for raw in (good, good + b"x", good[:-1], good[:6], b"\x00\x00\x00\x00abc"):
        decoded = _decode(singles[:1] if raw is not good else singles, raw=raw)
        assert decoded.error is not None and decoded.messages == [] and decoded.skipped == 1
