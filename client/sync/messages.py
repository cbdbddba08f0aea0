"""The blocking API's MessageId and Message: the official client's accessor methods."""

from __future__ import annotations

from typing import Any

from magnetar.client.aio import message as _aio_message
from magnetar.proto import ids as _ids


class MessageId:
    """A message's id, with the official client's accessors."""

    # _topic: the topic the id belongs to, when known (a received message's
    # id, or deserialize(..., topic=)); a multi-topic consumer routes by it.
    __slots__ = ("_id", "_topic")

    earliest: MessageId
    latest: MessageId

    def __init__(
        self, partition: int = -1, ledger_id: int = -1, entry_id: int = -1, batch_index: int = -1
    ) -> None:
        self._id = _ids.MessageId(ledger_id, entry_id, partition, batch_index)
        self._topic: str | None = None

    @classmethod
    def wrap(cls, msg_id: _ids.MessageId, topic: str | None = None) -> MessageId:
        self = cls.__new__(cls)
        self._id = msg_id
        self._topic = topic
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
        """The id `serialize` gave; with `topic`, a multi-topic consumer can
        acknowledge it."""
        return MessageId.wrap(_ids.MessageId.deserialize(message_id_bytes), topic)

    @property
    def topic(self) -> str | None:
        """The topic the id belongs to, when known."""
        return self._topic

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


class Message(_aio_message.Message):
    """A received message (official accessor names).

    The async core's Message with the official types where they differ:
    `message_id()` gives this module's MessageId and `value()` decodes with the
    consumer's schema. The consumer's decoder builds these directly, so
    receiving wraps nothing.
    """

    __slots__ = ()

    # Set on the per-schema subclass that `message_class(schema)` makes.
    _schema: Any = None

    def value(self) -> Any:
        schema = self._schema
        if schema is None:
            return self.data()
        # decode_message: an Avro schema reads with the writer's schema (the
        # message's schema version) and resolves to its own.
        return schema.decode_message(self)

    def int_schema_version(self) -> int:
        """The schema version as a number; -1 when the message has none."""
        raw = super().schema_version()
        return int.from_bytes(raw, "big") if raw else -1

    def schema_version(self) -> str:  # type: ignore[override]
        """The version as the official client gives it: a str of the
        version's bytes (`.encode()` gives the bytes back for versions below
        128, `.encode("latin-1")` for any)."""
        return super().schema_version().decode("latin-1")

    def message_id(self) -> MessageId:  # type: ignore[override]
        return MessageId.wrap(self.proto_message_id(), self.topic_name())

    @property
    def _msg(self) -> _aio_message.Message:
        """The message as the async core takes it (itself)."""
        return self


def message_class(schema: Any) -> type[Message]:
    """The Message class a consumer with `schema` builds its messages as."""
    if schema is None:
        return Message
    return type("Message", (Message,), {"__slots__": (), "_schema": schema})


def seek_target(messageid: MessageId | int) -> _ids.MessageId | int:
    """What a consumer's or reader's seek takes: a message id, or a publish
    time in ms since the epoch."""
    if isinstance(messageid, MessageId):
        return messageid.inner
    if isinstance(messageid, int):
        return messageid
    raise ValueError(f"seek takes a MessageId or a publish time in ms, not {messageid!r}")
