"""Messages on the way out (OutgoingMessage) and on the way in (Message)."""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Self

from google.protobuf.message import DecodeError

from magnetar.client.aio.crypto import EncryptionContext
from magnetar.client.aio.errors import PulsarException
from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.ids import MessageId
from magnetar.proto.messages import ordering_key, partition_key

# Called once per message with (None, id) on success or (error, None).
SendCallback = Callable[[PulsarException | None, MessageId | None], None]

_U32 = struct.Struct(">I")

# replicate_to value that keeps a message in the local cluster (Pulsar's marker).
LOCAL_CLUSTER_ONLY = "__local__"


class OutgoingMessage:
    """One application message with its options, before batching or framing."""

    __slots__ = (
        "deliver_at",
        "event_time",
        "null_value",
        "ordering_key",
        "partition_key",
        "payload",
        "properties",
        "replicate_to",
        "sequence_id",
    )

    def __init__(
        self,
        payload: bytes,
        *,
        properties: Mapping[str, str] | None = None,
        partition_key: str | None = None,
        ordering_key: str | bytes | None = None,
        sequence_id: int | None = None,
        event_time: int | None = None,
        deliver_at: int | None = None,
        replicate_to: Sequence[str] | None = None,
        null_value: bool = False,
    ) -> None:
        self.payload = payload
        self.properties = properties
        self.partition_key = partition_key or None
        self.ordering_key = (
            ordering_key.encode() if isinstance(ordering_key, str) else ordering_key
        ) or None
        self.sequence_id = sequence_id
        self.event_time = event_time or None
        self.deliver_at = deliver_at
        self.replicate_to = replicate_to
        self.null_value = null_value

    @property
    def routing_key(self) -> str | None:
        return self.partition_key

    def batch_key(self) -> bytes:
        """The key the key-based batcher groups by: ordering key, else partition key."""
        if self.ordering_key is not None:
            return self.ordering_key
        return self.partition_key.encode() if self.partition_key is not None else b""

    def fill_metadata(self, meta: pb.MessageMetadata) -> None:
        """Set this message's own fields on an entry's MessageMetadata."""
        props = self.properties
        if props:
            meta.properties.extend(pb.KeyValue(key=k, value=v) for k, v in sorted(props.items()))
        if self.partition_key is not None:
            meta.partition_key = self.partition_key
        if self.ordering_key is not None:
            meta.ordering_key = self.ordering_key
        if self.event_time:
            meta.event_time = self.event_time
        if self.deliver_at is not None:
            meta.deliver_at_time = self.deliver_at
        if self.replicate_to:
            meta.replicate_to.extend(self.replicate_to)
        if self.null_value:
            meta.null_value = True

    def single_metadata(self, sequence_id: int) -> bytes:
        """The serialized SingleMessageMetadata of this message inside a batch."""
        meta = pb.SingleMessageMetadata(payload_size=len(self.payload), sequence_id=sequence_id)
        props = self.properties
        if props:
            meta.properties.extend(pb.KeyValue(key=k, value=v) for k, v in sorted(props.items()))
        if self.partition_key is not None:
            meta.partition_key = self.partition_key
        if self.ordering_key is not None:
            meta.ordering_key = self.ordering_key
        if self.event_time:
            meta.event_time = self.event_time
        if self.null_value:
            meta.null_value = True
        return meta.SerializeToString()


class Entry:
    """What the messages of one received entry share: where it is stored, its
    MessageMetadata, its redelivery count. A batch's messages point here rather
    than each carrying copies (SEM-3.3: they are acked as one entry)."""

    __slots__ = (
        "batch_size",
        "body",
        "chunk_ids",
        "decryption_failed",
        "entry_id",
        "key",
        "ledger_id",
        "metadata",
        "partition",
        "redelivery_count",
        "topic",
    )

    def __init__(
        self,
        topic: str,
        ledger_id: int,
        entry_id: int,
        partition: int,
        metadata: pb.MessageMetadata,
        redelivery_count: int = 0,
        batch_size: int = 0,
        chunk_ids: tuple[MessageId, ...] | None = None,
    ) -> None:
        self.topic = topic
        self.ledger_id = ledger_id
        self.entry_id = entry_id
        self.key = (ledger_id, entry_id)
        self.partition = partition
        self.metadata = metadata
        self.redelivery_count = redelivery_count
        # num_messages_in_batch for a batch entry, else 0.
        self.batch_size = batch_size
        # A reassembled chunked message: the ids of its chunks, acked together.
        self.chunk_ids = chunk_ids
        # A batch's (decompressed) payload, where its messages' metadata is read.
        self.body = b""
        # Encrypted, and handed out as it is (crypto_failure_action CONSUME).
        self.decryption_failed = False

    def single_at(self, offset: int) -> pb.SingleMessageMetadata:
        """The SingleMessageMetadata of the batch message whose metadata starts
        at `offset` of the body (its u32 size just before it)."""
        size = _U32.unpack_from(self.body, offset - 4)[0]
        try:
            return pb.SingleMessageMetadata.FromString(self.body[offset : offset + size])
        except DecodeError:
            # Its framing was checked when the batch was split; the rest reads as unset.
            return pb.SingleMessageMetadata()


class Message:
    """A received message; accessors are named as in the official client.

    Built once per message on the receive path, so it holds only its payload,
    its entry and its batch index; the message id, properties and keys are
    computed when asked (a batch message reads them from its
    SingleMessageMetadata, a whole entry from the entry's metadata).
    """

    __slots__ = ("_data", "_id", "_single", "batch_index", "entry")

    def __init__(
        self,
        data: bytes,
        entry: Entry,
        index: int = -1,
        single: pb.SingleMessageMetadata | int | None = None,
    ) -> None:
        # Kept to plain stores: one of these is built per received message.
        self._data = data
        # The received entry this message is (part of), and its index in the
        # entry's batch (-1 for a whole entry): read by the ack paths.
        self.entry = entry
        self.batch_index = index
        # A batch message's SingleMessageMetadata, or where in the entry's body
        # it starts (parsed on first use); None for a whole entry.
        self._single = single
        self._id: MessageId | None = None

    @classmethod
    def of(cls, msg: Message) -> Self:
        """`msg` as an instance of this class (a subclass's view of a message)."""
        if msg.__class__ is cls:
            return msg
        out = cls(msg._data, msg.entry, msg.batch_index, msg._single)
        out._id = msg._id
        return out

    def metadata_view(self) -> pb.MessageMetadata | pb.SingleMessageMetadata:
        """Where its key, event time and properties are read: the entry's
        metadata, or its SingleMessageMetadata in a batch (for readers of many
        messages at once, such as the Spark connector's columns)."""
        single = self._single
        if single is None:
            return self.entry.metadata
        if isinstance(single, int):
            single = self._single = self.entry.single_at(single)
        return single

    @property
    def ack_ids(self) -> tuple[MessageId, ...]:
        """The ids to acknowledge for this message: its chunks', or its own."""
        chunks = self.entry.chunk_ids
        return chunks if chunks is not None else (self.proto_message_id(),)

    def data(self) -> bytes:
        return self._data

    def value(self) -> bytes:
        return self._data

    def properties(self) -> dict[str, str]:
        return {kv.key: kv.value for kv in self.metadata_view().properties}

    def partition_key(self) -> str:
        return partition_key(self.metadata_view()) or ""

    def ordering_key(self) -> str:
        return (ordering_key(self.metadata_view()) or b"").decode(errors="replace")

    def ordering_key_bytes(self) -> bytes | None:
        return ordering_key(self.metadata_view())

    def publish_timestamp(self) -> int:
        return self.entry.metadata.publish_time

    def event_timestamp(self) -> int:
        return self.metadata_view().event_time

    def message_id(self) -> MessageId:
        return self.proto_message_id()

    def proto_message_id(self) -> MessageId:
        """The id as magnetar.proto's MessageId, what this package's code
        takes: the blocking facade's subclass returns its own MessageId type
        from message_id()."""
        msg_id = self._id
        if msg_id is None:
            entry = self.entry
            if self.batch_index < 0:
                msg_id = MessageId(entry.ledger_id, entry.entry_id, entry.partition)
            else:
                msg_id = MessageId(
                    entry.ledger_id,
                    entry.entry_id,
                    entry.partition,
                    self.batch_index,
                    entry.batch_size,
                )
            self._id = msg_id
        return msg_id

    def topic_name(self) -> str:
        return self.entry.topic

    def redelivery_count(self) -> int:
        return self.entry.redelivery_count

    def schema_version(self) -> bytes:
        return self.entry.metadata.schema_version

    def producer_name(self) -> str:
        return self.entry.metadata.producer_name

    def has_null_value(self) -> bool:
        return self.metadata_view().null_value

    def encryption_context(self) -> EncryptionContext | None:
        """How the message was encrypted end to end; None if it was not."""
        entry = self.entry
        if not entry.metadata.encryption_keys:
            return None
        return EncryptionContext(entry.metadata, entry.decryption_failed)

    def __repr__(self) -> str:
        return f"Message({self.proto_message_id()}, {len(self._data)} bytes)"
