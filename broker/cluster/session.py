"""EtcdSession: one etcd lease, kept alive, and how long it surely lives.

The broker's registration and bundle ownership keys hang on this lease. The
session tracks a conservative deadline: a keep-alive sent at local time t and
answered with TTL n proves the lease lives until at least t + n on the
server's side, so the broker holds its ownership until t + n - margin by its
own monotonic clock and no longer. Past that deadline `valid` is False at
once, whatever the event loop was doing (a pause, a stall), and the storage
write guard refuses to confirm writes: the new owner may fence only after the
lease expired on the server, which is later.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import aetcd
import aetcd.exceptions
import structlog

log = structlog.get_logger(__name__)

MonotonicClock = Callable[[], float]


class SessionLost(Exception):
    """The lease expired or could not be renewed in time."""


class EtcdSession:
    """Start with :meth:`open`; `on_lost` runs once when the lease is gone."""

    def __init__(
        self,
        client: aetcd.Client,
        lease_id: int,
        ttl: int,
        granted_at: float,
        on_lost: Callable[[], None],
        clock: MonotonicClock,
    ) -> None:
        self.client = client
        self.lease_id = lease_id
        self.ttl = ttl
        self._clock = clock
        # Renew three times per TTL; hold it until a fifth of the TTL is left.
        self._margin = max(ttl / 5, 0.2)
        self._valid_until = granted_at + ttl - self._margin
        self._on_lost = on_lost
        self._lost = False
        self._closed = False
        self._task: asyncio.Task[None] | None = None

    @classmethod
    async def open(
        cls,
        client: aetcd.Client,
        ttl: int,
        on_lost: Callable[[], None],
        clock: MonotonicClock = time.monotonic,
    ) -> EtcdSession:
        sent = clock()
        lease = await client.lease(ttl)
        session = cls(client, lease.id, lease.ttl, sent, on_lost, clock)
        session._task = asyncio.get_running_loop().create_task(
            session._keep_alive(), name="etcd-session-keepalive"
        )
        log.info("etcd session opened", lease=lease.id, ttl=lease.ttl)
        return session

    @property
    def valid(self) -> bool:
        """True while the lease surely lives (checked on every confirmation)."""
        return not self._lost and self._clock() < self._valid_until

    def write_guard(self) -> str | None:
        """The storage's question before it confirms a write: None = go on."""
        if self.valid:
            return None
        return "the broker's etcd session is lost: its ownership may have moved"

    async def _keep_alive(self) -> None:
        interval = self.ttl / 3
        try:
            while True:
                await asyncio.sleep(interval)
                if not self.valid:
                    break
                sent = self._clock()
                try:
                    reply = await asyncio.wait_for(
                        self.client.refresh_lease(self.lease_id), self._valid_until - sent
                    )
                except (TimeoutError, aetcd.exceptions.ClientError) as exc:
                    log.warning("lease keep-alive failed", lease=self.lease_id, error=repr(exc))
                    continue
                if reply is None or reply.TTL <= 0:
                    break
                self._valid_until = max(self._valid_until, sent + reply.TTL - self._margin)
        finally:
            if not self._closed:
                self._lose()

    def _lose(self) -> None:
        if self._lost:
            return
        self._lost = True
        log.error("etcd session lost", lease=self.lease_id)
        self._on_lost()

    async def close(self, *, revoke: bool = True) -> None:
        """Stop renewing; with `revoke`, drop the lease (and its keys) now."""
        if self._closed:
            return
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if revoke and not self._lost:
            try:
                await self.client.revoke_lease(self.lease_id)
            except aetcd.exceptions.ClientError as exc:
                log.warning("lease revoke failed", lease=self.lease_id, error=repr(exc))
        self._lost = True
