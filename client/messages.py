"""The blocking API's MessageId and Message: the official client's accessor methods."""

from __future__ import annotations

from typing import Any

from magnetar.client.aio import message as _aio_message
from magnetar.proto import ids as _ids


class MessageId:
    """A message's id, with the official client's accessors."""

    __slots__ = ("_id",)

    earliest: MessageId
    latest: MessageId

    def __init__(
        self, partition: int = -1, ledger_id: int = -1, entry_id: int = -1, batch_index: int = -1
    ) -> None:
        self._id = _ids.MessageId(ledger_id, entry_id, partition, batch_index)

    @classmethod
    def wrap(cls, msg_id: _ids.MessageId) -> MessageId:
        self = cls.__new__(cls)
        self._id = msg_id
        return self

    def ledger_id(self) -> int:
        return self._id.ledger_id

    def entry_id(self) -> int:
        return self._id.entry_id

    def batch_index(self) -> int:
        return self._id.batch_index

    def partition(self) -> int:
        return self._id.partition

    def serialize(self) -> bytes:
        return self._id.serialize()

    @staticmethod
    def deserialize(message_id_bytes: bytes, topic: str | None = None) -> MessageId:
        return MessageId.wrap(_ids.MessageId.deserialize(message_id_bytes))

    @property
    def inner(self) -> _ids.MessageId:
        """The id as magnetar.proto's MessageId (what the async API uses)."""
        return self._id

    def __str__(self) -> str:
        return str(self._id)

    def __repr__(self) -> str:
        return f"MessageId{self._id}"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MessageId) and self._id == other._id

    def __hash__(self) -> int:
        return hash(self._id)

    def __lt__(self, other: MessageId) -> bool:
        return self._id < other._id

    def __le__(self, other: MessageId) -> bool:
        return self._id <= other._id

    def __gt__(self, other: MessageId) -> bool:
        return self._id > other._id

    def __ge__(self, other: MessageId) -> bool:
        return self._id >= other._id


MessageId.earliest = MessageId.wrap(_ids.MessageId.earliest)
MessageId.latest = MessageId.wrap(_ids.MessageId.latest)


class Message:
    """A received message (official accessor names)."""

    __slots__ = ("_msg", "_schema")

    def __init__(self, msg: _aio_message.Message, schema: Any = None) -> None:
        self._msg = msg
        self._schema = schema

    def data(self) -> bytes:
        return self._msg.data()

    def value(self) -> Any:
        data = self._msg.data()
        return self._schema.decode(data) if self._schema is not None else data

    def properties(self) -> dict[str, str]:
        return self._msg.properties()

    def partition_key(self) -> str:
        return self._msg.partition_key()

    def ordering_key(self) -> str:
        return self._msg.ordering_key()

    def publish_timestamp(self) -> int:
        return self._msg.publish_timestamp()

    def event_timestamp(self) -> int:
        return self._msg.event_timestamp()

    def message_id(self) -> MessageId:
        return MessageId.wrap(self._msg.message_id())

    def topic_name(self) -> str:
        return self._msg.topic_name()

    def redelivery_count(self) -> int:
        return self._msg.redelivery_count()

    def schema_version(self) -> bytes:
        return self._msg.schema_version()

    def producer_name(self) -> str:
        return self._msg.producer_name()

    def has_null_value(self) -> bool:
        return self._msg.has_null_value()
