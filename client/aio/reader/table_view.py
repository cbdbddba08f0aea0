"""TableView: a topic's latest value per key, kept up to date (Pulsar's TableView).

A reader of the compacted view reads the topic (every partition) from the
earliest message. `start` returns once everything the topic held when it
was called has been read; a task owned by the view then keeps reading. As
in Pulsar, a message with an empty or null value removes its key, messages
without a key are skipped, and listeners get (key, value) for every update,
removals included (value b"").
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog

from magnetar.client.aio.errors import AlreadyClosed, PulsarException
from magnetar.client.aio.message import Message
from magnetar.client.aio.reader.partitioned import PartitionedReader
from magnetar.client.aio.reader.reader import Reader
from magnetar.client.aio.tasks import cancel_and_wait

_log = structlog.get_logger("magnetar.client.sync.table_view")

TableListener = Callable[[str, bytes], object]


class TableView:
    def __init__(
        self,
        reader: Reader | PartitionedReader,
        topic: str,
        on_close: Callable[[TableView], object] | None = None,
    ) -> None:
        self._reader = reader
        self._on_close = on_close
        self._topic = topic
        self._data: dict[str, bytes] = {}
        self._listeners: list[TableListener] = []
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._log = _log.bind(topic=topic)

    @property
    def topic(self) -> str:
        return self._topic

    async def start(self) -> None:
        """Read what the topic holds now, then follow it in the background."""
        while await self._reader.has_message_available():
            self._apply(await self._reader.read_next())
        self._task = asyncio.get_running_loop().create_task(
            self._follow(), name=f"pulsar-table-view-{self._topic}"
        )

    async def _follow(self) -> None:
        # The reader reconnects by itself; an error reaching here means it is
        # closed or has failed for good, so the view keeps what it holds.
        try:
            while True:
                self._apply(await self._reader.read_next())
        except AlreadyClosed:
            return
        except PulsarException as exc:
            self._log.error("table view stopped following its topic", error=str(exc))

    def _apply(self, msg: Message) -> None:
        key = msg.partition_key()
        if not key:
            return
        value = b"" if msg.has_null_value() else msg.data()
        if value:
            self._data[key] = value
        else:
            self._data.pop(key, None)
        for listener in list(self._listeners):
            try:
                listener(key, value)
            except Exception as exc:  # one listener's bug must not stop the view
                self._log.exception("table view listener failed", key=key, error=str(exc))

    def get(self, key: str) -> bytes | None:
        return self._data.get(key)

    def size(self) -> int:
        return len(self._data)

    def snapshot(self) -> dict[str, bytes]:
        return dict(self._data)

    def listen(self, callback: TableListener) -> None:
        """`callback` for every update from now on."""
        self._listeners.append(callback)

    async def close(self) -> None:
        """Stop following the topic and close the reader (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._listeners.clear()
        await cancel_and_wait(self._task)
        await self._reader.close()
        if self._on_close is not None:
            self._on_close(self)
