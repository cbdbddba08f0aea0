"""MessageDecoder: a MESSAGE frame into the application messages it carries.

Chunks are reassembled (SEM-8.2), payloads decompressed, batches split, and
indexes the broker marks as acked in ack_set (SEM-3.3, WIRE 14) or compacted
out are skipped. Pure: the consumer decides about permits and acks.

Splitting a batch is the receive path's per-message work, so it is one tight
pass over the payload: each SingleMessageMetadata is parsed once (by the
protobuf runtime, which also validates it) and kept on its Message for the
accessors; everything the messages share lives once on their Entry.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from google.protobuf.message import DecodeError

from magnetar.client.aio.compression import decompress
from magnetar.client.aio.consumer.chunking import ChunkAssembler
from magnetar.client.aio.crypto import ConsumerCrypto
from magnetar.client.aio.errors import PulsarException
from magnetar.client.aio.message import Entry, Message
from magnetar.proto import messages as batches, pulsar_api_pb2 as pb
from magnetar.proto.errors import ProtocolError
from magnetar.proto.frames import Frame
from magnetar.proto.ids import MessageId, to_signed64

_U32 = struct.Struct(">I")
_parse_single = pb.SingleMessageMetadata.FromString
# SingleMessageMetadata tags: payload_size (field 3) and compacted_out (field 4), varints.
_PAYLOAD_SIZE_TAG = 3 << 3
_COMPACTED_OUT_TAG = 4 << 3


@dataclass
class Decoded:
    entry: tuple[int, int]
    messages: list[Message] = field(default_factory=list)
    # Batch indexes handed out (a batch entry is acked when all of them are).
    batch_indexes: set[int] = field(default_factory=set)
    # Messages of the entry not handed out: their permits are free.
    skipped: int = 0
    # Payload bytes of the messages handed out.
    size: int = 0
    error: str | None = None
    # Encrypted and not decryptable here: the consumer applies crypto_failure_action.
    undecryptable: bool = False


class MessageDecoder:
    def __init__(
        self,
        topic: str,
        partition: int,
        chunks: ChunkAssembler,
        *,
        consume_encrypted: bool = False,
        crypto: ConsumerCrypto | None = None,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.chunks = chunks
        # Opens end-to-end encrypted payloads (a crypto_key_reader was given).
        self.crypto = crypto
        # crypto_failure_action CONSUME: hand encrypted payloads out as they are.
        self.consume_encrypted = consume_encrypted
        # What to build: the blocking facade has its messages built as its own subclass.
        self.message_class: type[Message] = Message

    def clear(self) -> None:
        self.chunks.clear()

    def decode(self, frame: Frame) -> Decoded:
        command = frame.command.message
        ledger = to_signed64(command.message_id.ledgerId)
        entry_id = to_signed64(command.message_id.entryId)
        out = Decoded((ledger, entry_id))
        payload = frame.payload
        if payload is None:
            out.skipped = 1
            return out
        try:
            meta = payload.metadata
            body = payload.payload
            chunk_ids: tuple[MessageId, ...] | None = None
            if batches.is_chunk(meta):
                chunk_id = MessageId(ledger, entry_id, self.partition)
                assembled = self.chunks.add(meta, body, chunk_id)
                if assembled is None:
                    out.skipped = 1
                    return out
                body = assembled.payload
                chunk_ids = assembled.chunk_ids
            entry = Entry(
                self.topic,
                ledger,
                entry_id,
                self.partition,
                meta,
                command.redelivery_count,
                meta.num_messages_in_batch if batches.is_batch(meta) else 0,
                chunk_ids,
            )
            if meta.encryption_keys:
                plain = self.crypto.decrypt(meta, body) if self.crypto is not None else None
                if plain is not None:
                    body = plain
                elif not self.consume_encrypted:
                    out.undecryptable = True
                    out.skipped = 1
                    return out
                else:
                    # CONSUME: the payload as it came, a batch as one message.
                    entry.batch_size = 0
                    entry.decryption_failed = True
                    out.messages.append(self.message_class(body, entry))
                    out.size = len(body)
                    return out
            if meta.compression:
                body = decompress(meta.compression, body, meta.uncompressed_size)
            if batches.is_batch(meta):
                _split(entry, body, list(command.ack_set), out, self.message_class)
            else:
                out.messages.append(self.message_class(body, entry))
                out.size = len(body)
        except (PulsarException, ProtocolError) as exc:
            out.error = str(exc)
            out.messages.clear()
            out.batch_indexes.clear()
            out.skipped = 1
            out.size = 0
        return out


def _split(entry: Entry, body: bytes, ack_set: list[int], out: Decoded, new: type[Message]) -> None:
    """The messages of a batch payload (format in magnetar.proto.messages), in one pass.

    Raises ProtocolError unless the payload holds exactly the entry's count of
    well-formed messages.
    """
    count = entry.batch_size
    if count < 0:
        raise ProtocolError(f"negative message count {count} in batch")
    end = len(body)
    offset = 0
    size_total = 0
    messages = out.messages
    append = messages.append
    unpack = _U32.unpack_from
    parse = _parse_single
    entry.body = body
    index = 0
    try:
        for index in range(count):
            start = offset + 4
            meta_end = start + unpack(body, offset)[0]
            if meta_end > end:
                raise ProtocolError(f"batch message {index}: metadata exceeds the payload")
            # The common metadata, read here: payload_size first (field 3, varint
            # of one or two bytes) and no compacted_out (field 4) after it.
            # Serializers write fields in number order, so anything else (keys,
            # properties, compacted_out) takes the full parse.
            single: pb.SingleMessageMetadata | int = start
            size = body[start + 1] if body[start] == _PAYLOAD_SIZE_TAG else 0x80
            if size < 0x80:
                rest = start + 2
            elif body[start] == _PAYLOAD_SIZE_TAG and body[start + 2] < 0x80:
                size = (size & 0x7F) | body[start + 2] << 7
                rest = start + 3
            else:
                rest = -1
            if rest < 0 or (rest < meta_end and body[rest] == _COMPACTED_OUT_TAG):
                single = parse(body[start:meta_end])
                size = single.payload_size
                if not size and not single.HasField("payload_size"):
                    raise ProtocolError(f"batch message {index}: metadata without payload_size")
                if single.compacted_out:
                    out.skipped += 1
                    offset = meta_end + size
                    continue
            elif rest > meta_end:
                raise ProtocolError(f"batch message {index}: metadata truncated")
            offset = meta_end + size
            if offset > end:
                raise ProtocolError(
                    f"batch message {index}: payload size {size} does not fit the payload"
                )
            # ack_set bits mark the indexes still unacked (WIRE 14).
            if ack_set and not (ack_set[index // 64] >> (index % 64)) & 1:
                out.skipped += 1
                continue
            append(new(body[meta_end:offset], entry, index, single))
            size_total += size
    except struct.error:
        raise ProtocolError(
            f"batch truncated: message {index} of {count} has no size field"
        ) from None
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise ProtocolError(f"batch message {index}: undecodable metadata: {exc}") from exc
    except IndexError:
        raise ProtocolError(f"batch message {index}: truncated, or beyond the ack_set") from None
    if offset != end:
        raise ProtocolError(f"batch of {count} messages has {end - offset} trailing bytes")
    out.size = size_total
    if out.skipped:
        out.batch_indexes.update(m.batch_index for m in messages)
    else:
        out.batch_indexes.update(range(count))
