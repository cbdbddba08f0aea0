"""The blocking Reader, named as `pulsar.Reader`."""

from __future__ import annotations

from typing import Any

from magnetar.client.aio.reader import reader as _aio_reader
from magnetar.client.aio.reader.partitioned import PartitionedReader
from magnetar.client.sync.loop import ClientLoop
from magnetar.client.sync.messages import Message, MessageId, message_class, seek_target


class Reader:
    def __init__(
        self, client: ClientLoop, reader: _aio_reader.Reader | PartitionedReader, schema: Any
    ) -> None:
        self._client = client
        self._reader = reader
        self._schema = schema
        self._message_class = message_class(schema)

    def topic(self) -> str:
        return self._reader.topic()

    def read_next(self, timeout_millis: int | None = None) -> Message:
        msg = self._client.run(self._reader.read_next(timeout_millis))
        return self._message_class.of(msg)

    def has_message_available(self) -> bool:
        return self._client.run(self._reader.has_message_available())

    def seek(self, messageid: MessageId | int) -> None:
        """To a message id, or to a publish time in ms since the epoch."""
        self._client.run(self._reader.seek(seek_target(messageid)))

    def get_last_message_id(self) -> MessageId:
        """The topic's last message id (not in the official Reader)."""
        return MessageId.wrap(self._client.run(self._reader.get_last_message_id()))

    def is_connected(self) -> bool:
        return self._reader.is_connected()

    def close(self) -> None:
        self._client.run(self._reader.close())
