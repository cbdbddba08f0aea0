"""ConnectionPool: at most one live connection per broker address, shared.

Concurrent callers asking for the same address wait on the same connect
attempt. A connection that closed is replaced on the next request; the pool
keeps every connection it made until `close()`, which closes and awaits them.
"""

from __future__ import annotations

import asyncio
import functools

from magnetar.client.aio.errors import AlreadyClosed, ConnectError
from magnetar.client.aio.net.connection import ClientConnection
from magnetar.client.aio.net.security import NO_SECURITY, Security


class ConnectionPool:
    def __init__(
        self,
        *,
        connection_timeout: float = 10.0,
        operation_timeout: float = 30.0,
        keepalive_interval: float = 30.0,
        security: Security = NO_SECURITY,
    ) -> None:
        self.security = security
        self.connection_timeout = connection_timeout
        self.operation_timeout = operation_timeout
        self.keepalive_interval = keepalive_interval
        self._live: dict[str, ClientConnection] = {}
        self._connecting: dict[str, asyncio.Task[ClientConnection]] = {}
        self._retired: list[ClientConnection] = []
        self._closed = False

    async def get_connection(self, address: str) -> ClientConnection:
        """The live connection to `host:port`, connecting when there is none."""
        if self._closed:
            raise AlreadyClosed("the client is closed")
        cnx = self._live.get(address)
        if cnx is not None and not cnx.is_closed:
            return cnx
        if cnx is not None:
            del self._live[address]
            self._retire(cnx)
        task = self._connecting.get(address)
        if task is None:
            task = asyncio.get_running_loop().create_task(
                ClientConnection.open(
                    address,
                    connection_timeout=self.connection_timeout,
                    operation_timeout=self.operation_timeout,
                    keepalive_interval=self.keepalive_interval,
                    security=self.security,
                ),
                name=f"pulsar-connect-{address}",
            )
            self._connecting[address] = task
            task.add_done_callback(functools.partial(self._connected, address))
        # Shielded: one caller giving up must not cancel the others' attempt.
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if not task.cancelled() or (current is not None and current.cancelling()):
                raise  # the caller itself is being cancelled
            # The attempt was dropped (cluster switch, close): the caller retries or stops.
            if self._closed:
                raise AlreadyClosed("the client is closed") from None
            raise ConnectError(f"connection attempt to {address} dropped") from None

    def _connected(self, address: str, task: asyncio.Task[ClientConnection]) -> None:
        if self._connecting.get(address) is task:
            del self._connecting[address]
        if task.cancelled() or task.exception() is not None:
            return
        cnx = task.result()
        if self._closed:
            self._retire(cnx)
            cnx.abort(AlreadyClosed("the client is closed"))
        else:
            self._live[address] = cnx

    def _retire(self, cnx: ClientConnection) -> None:
        # Keep closed connections until their tasks are awaited in close().
        self._retired.append(cnx)
        if len(self._retired) > 64:
            self._retired = [c for c in self._retired if not c.finished]

    def drop_connections(self, cause: BaseException) -> None:
        """Close every connection now (the client switched clusters); their
        producers and consumers reconnect through the lookup."""
        for task in self._connecting.values():
            task.cancel()
        live, self._live = list(self._live.values()), {}
        for cnx in live:
            self._retire(cnx)
            cnx.abort(cause)

    @property
    def connections(self) -> list[ClientConnection]:
        return [cnx for cnx in self._live.values() if not cnx.is_closed]

    async def close(self) -> None:
        """Close every connection (idempotent) and wait for their tasks."""
        self._closed = True
        for task in list(self._connecting.values()):
            task.cancel()
        connecting = list(self._connecting.values())
        if connecting:
            await asyncio.gather(*connecting, return_exceptions=True)
        for task in connecting:
            if not task.cancelled() and task.exception() is None:
                self._retired.append(task.result())
        all_cnx = list(self._live.values()) + self._retired
        self._live.clear()
        self._retired = []
        await asyncio.gather(
            *(cnx.close(AlreadyClosed("the client is closed")) for cnx in all_cnx),
            return_exceptions=True,
        )
