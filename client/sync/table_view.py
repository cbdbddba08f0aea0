"""The blocking TableView, named as `pulsar.TableView`.

Values are decoded with the view's schema when read. Listener callbacks run
in order on the view's own thread (not the client's loop), so a callback may
call back into the blocking client.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from typing import Any

from magnetar.client.aio.log import get_logger
from magnetar.client.aio.reader import table_view as _aio_table_view
from magnetar.client.sync.loop import ClientLoop

_log = get_logger("magnetar.client.sync.table_view")


class TableView:
    def __init__(
        self,
        client: ClientLoop,
        view: _aio_table_view.TableView,
        subscription_name: str | None,
        schema: Any,
    ) -> None:
        self._client = client
        self._view = view
        self._subscription = subscription_name
        self._schema = schema
        self._callbacks: concurrent.futures.ThreadPoolExecutor | None = None

    def _decode(self, value: bytes) -> Any:
        return self._schema.decode(value) if self._schema is not None else value

    def get(self, key: str) -> Any | None:
        """The latest value of `key`, or None when the view has none."""
        value = self._view.get(key)
        return self._decode(value) if value is not None else None

    def for_each(self, callback: Callable[[str, Any], None]) -> None:
        """callback(key, value) for every entry, in this thread."""
        for key, value in self._client.run(self._snapshot()).items():
            callback(key, self._decode(value))

    def for_each_and_listen(self, callback: Callable[[str, Any], None]) -> None:
        """callback(key, value) for every entry, then for every update; the
        entries are done when this returns."""
        if self._callbacks is None:
            self._callbacks = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix="magnetar-table-view"
            )
        callbacks = self._callbacks

        def call(key: str, value: bytes) -> None:
            try:
                callback(key, self._decode(value))
            except Exception as exc:  # the next update still gets its call
                _log.exception("table view listener failed", key=key, error=str(exc))

        def entries(snapshot: dict[str, bytes]) -> None:
            for key, value in snapshot.items():
                call(key, value)

        async def register() -> concurrent.futures.Future[None]:
            # On the loop, so no update falls between the snapshot and the listener.
            first = callbacks.submit(entries, self._view.snapshot())
            self._view.listen(lambda key, value: callbacks.submit(call, key, value))
            return first

        self._client.run(register()).result()

    async def _snapshot(self) -> dict[str, bytes]:
        return self._view.snapshot()

    def close(self) -> None:
        if not self._client.closed:
            self._client.run(self._view.close())
        if self._callbacks is not None:
            self._callbacks.shutdown(wait=False, cancel_futures=True)

    def __len__(self) -> int:
        return self._view.size()

    def __str__(self) -> str:
        if self._subscription is None:
            return f"TableView(topic={self._view.topic})"
        return f"TableView(topic={self._view.topic}, subscription={self._subscription})"

    def __repr__(self) -> str:
        return self.__str__()
