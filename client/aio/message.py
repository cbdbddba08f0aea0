"""Messages on the way out (OutgoingMessage) and on the way in (Message)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from magnetar.client.aio.errors import PulsarException
from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.ids import MessageId

# Called once per message with (None, id) on success or (error, None).
SendCallback = Callable[[PulsarException | None, MessageId | None], None]

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


@dataclass(frozen=True, slots=True)
class Message:
    """A received message; accessors are named as in the official client."""

    _data: bytes
    _message_id: MessageId
    _topic: str
    _properties: dict[str, str]
    _partition_key: str | None
    _ordering_key: bytes | None
    _publish_time: int
    _event_time: int
    _producer_name: str
    _redelivery_count: int
    _null_value: bool
    _schema_version: bytes
    # The ids to acknowledge for this message: its chunks', or its own.
    _ack_ids: tuple[MessageId, ...] = ()

    def data(self) -> bytes:
        return self._data

    def value(self) -> bytes:
        return self._data

    def properties(self) -> dict[str, str]:
        return dict(self._properties)

    def partition_key(self) -> str:
        return self._partition_key or ""

    def ordering_key(self) -> str:
        return (self._ordering_key or b"").decode(errors="replace")

    def ordering_key_bytes(self) -> bytes | None:
        return self._ordering_key

    def publish_timestamp(self) -> int:
        return self._publish_time

    def event_timestamp(self) -> int:
        return self._event_time

    def message_id(self) -> MessageId:
        return self._message_id

    def topic_name(self) -> str:
        return self._topic

    def redelivery_count(self) -> int:
        return self._redelivery_count

    def schema_version(self) -> bytes:
        return self._schema_version

    def producer_name(self) -> str:
        return self._producer_name

    def has_null_value(self) -> bool:
        return self._null_value
