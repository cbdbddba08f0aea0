"""MessageDecoder: a MESSAGE frame into the application messages it carries.

Chunks are reassembled (SEM-8.2), payloads decompressed, batches split, and
indexes the broker marks as acked in ack_set (SEM-3.3, WIRE 14) or compacted
out are skipped. Pure: the consumer decides about permits and acks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from magnetar.client.aio.chunking import ChunkAssembler
from magnetar.client.aio.compression import decompress
from magnetar.client.aio.errors import PulsarException
from magnetar.client.aio.message import Message
from magnetar.proto import messages as batches
from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.errors import ProtocolError
from magnetar.proto.frames import Frame
from magnetar.proto.ids import MessageId, to_signed64


@dataclass
class Decoded:
    entry: tuple[int, int]
    messages: list[Message] = field(default_factory=list)
    # Batch indexes handed out (a batch entry is acked when all of them are).
    batch_indexes: set[int] = field(default_factory=set)
    # Messages of the entry not handed out: their permits are free.
    skipped: int = 0
    error: str | None = None
    # Encrypted and not decryptable here: the consumer applies crypto_failure_action.
    undecryptable: bool = False


class MessageDecoder:
    def __init__(
        self, topic: str, partition: int, chunks: ChunkAssembler, *, consume_encrypted: bool = False
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.chunks = chunks
        # crypto_failure_action CONSUME: hand encrypted payloads out as they are.
        self.consume_encrypted = consume_encrypted

    def clear(self) -> None:
        self.chunks.clear()

    def decode(self, frame: Frame) -> Decoded:
        command = frame.command.message
        ledger = to_signed64(command.message_id.ledgerId)
        entry = to_signed64(command.message_id.entryId)
        out = Decoded((ledger, entry))
        payload = frame.payload
        if payload is None:
            out.skipped = 1
            return out
        entry_id = MessageId(ledger, entry, self.partition)
        try:
            meta = payload.metadata
            body = payload.payload
            ack_ids: tuple[MessageId, ...] = (entry_id,)
            if batches.is_chunk(meta):
                assembled = self.chunks.add(meta, body, entry_id)
                if assembled is None:
                    out.skipped = 1
                    return out
                body = assembled.payload
                ack_ids = assembled.chunk_ids
            if meta.encryption_keys:
                # No decryption here (SEM-1: crypto later): the payload is opaque.
                if not self.consume_encrypted:
                    out.undecryptable = True
                    out.skipped = 1
                    return out
                out.messages.append(self._message(command, meta, meta, body, entry_id, ack_ids))
                return out
            if meta.compression:
                body = decompress(meta.compression, body, meta.uncompressed_size)
            if batches.is_batch(meta):
                self._split(command, meta, body, out)
            else:
                out.messages.append(self._message(command, meta, meta, body, entry_id, ack_ids))
        except (PulsarException, ProtocolError) as exc:
            out.error = str(exc)
            out.messages.clear()
            out.batch_indexes.clear()
            out.skipped = 1
        return out

    def _split(
        self, command: pb.CommandMessage, meta: pb.MessageMetadata, body: bytes, out: Decoded
    ) -> None:
        ledger, entry = out.entry
        count = meta.num_messages_in_batch
        ack_set = list(command.ack_set)
        for index, (single, data) in enumerate(batches.split_batch(body, count)):
            # ack_set bits mark the indexes still unacked (WIRE 14).
            acked = bool(ack_set) and not (ack_set[index // 64] >> (index % 64)) & 1
            if acked or single.compacted_out:
                out.skipped += 1
                continue
            out.batch_indexes.add(index)
            msg_id = MessageId(ledger, entry, self.partition, index, count)
            out.messages.append(self._message(command, meta, single, data, msg_id, (msg_id,)))

    def _message(
        self,
        command: pb.CommandMessage,
        meta: pb.MessageMetadata,
        single: pb.MessageMetadata | pb.SingleMessageMetadata,
        body: bytes,
        msg_id: MessageId,
        ack_ids: tuple[MessageId, ...],
    ) -> Message:
        return Message(
            body,
            msg_id,
            self.topic,
            batches.properties(single) if single.properties else {},
            batches.partition_key(single),
            batches.ordering_key(single),
            meta.publish_time,
            single.event_time,
            meta.producer_name,
            command.redelivery_count,
            single.null_value,
            meta.schema_version,
            ack_ids,
        )
