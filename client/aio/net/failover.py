"""Switching clusters on the client: ServiceInfo, ServiceInfoProvider and
AutoClusterFailover, shaped like the `pulsar` module's.

A client made with a provider starts on the provider's initial ServiceInfo
and hands it a callback; whenever the callback is given another ServiceInfo
(from any thread) the client takes its URL, authentication and trust store,
drops its connections, and its producers and consumers reconnect through
the new cluster's lookup. AutoClusterFailover is a provider of ours: a task
that probes the clusters by opening a TCP connection every
``check_interval_ms``, moves to the first reachable secondary after
``failover_threshold`` failed probes of the one in use, and back to the
primary after ``switch_back_threshold`` good probes of it.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import structlog

from magnetar.client.aio.net.auth import Authentication
from magnetar.client.aio.net.lookup import ServiceUrl

log = structlog.get_logger(__name__)

# A probe never waits longer than this for its TCP connection (nor longer
# than the interval between probes).
PROBE_TIMEOUT_S = 3.0


class ServiceInfo:
    """One cluster's endpoint: service URL, authentication, TLS trust store."""

    def __init__(
        self,
        service_url: str,
        authentication: Authentication | None = None,
        tls_trust_certs_file_path: str | None = None,
    ) -> None:
        if not isinstance(service_url, str):
            raise ValueError("service_url must be a string")
        if authentication is not None and not isinstance(authentication, Authentication):
            raise ValueError("authentication must be a pulsar Authentication object")
        if tls_trust_certs_file_path is not None and not isinstance(tls_trust_certs_file_path, str):
            raise ValueError("tls_trust_certs_file_path must be a string")
        self._url = ServiceUrl.parse(service_url)
        self._service_url = service_url
        self.authentication = authentication
        self._trust = tls_trust_certs_file_path

    @property
    def service_url(self) -> str:
        return self._service_url

    @property
    def use_tls(self) -> bool:
        return self._url.uses_tls

    @property
    def tls_trust_certs_file_path(self) -> str | None:
        return self._trust

    @property
    def parsed(self) -> ServiceUrl:
        return self._url

    def __repr__(self) -> str:
        return (
            f"ServiceInfo(service_url={self.service_url!r}, use_tls={self.use_tls!r}, "
            f"tls_trust_certs_file_path={self.tls_trust_certs_file_path!r})"
        )


class ServiceInfoProvider(abc.ABC):
    """Base of user-written providers: the first ServiceInfo, then updates
    through the callback given to :meth:`initialize`; :meth:`close` is called
    when the client closes."""

    @abc.abstractmethod
    def initial_service_info(self) -> ServiceInfo: ...

    @abc.abstractmethod
    def initialize(self, on_service_info_update: Callable[[ServiceInfo], None]) -> None: ...

    def close(self) -> None:
        return None


class AutoClusterFailover:
    """Probe-driven failover from ``primary`` to ``secondary`` clusters."""

    def __init__(
        self,
        primary: ServiceInfo,
        secondary: list[ServiceInfo],
        check_interval_ms: int = 5000,
        failover_threshold: int = 1,
        switch_back_threshold: int = 1,
    ) -> None:
        if not isinstance(primary, ServiceInfo):
            raise ValueError("primary must be a ServiceInfo")
        if not isinstance(secondary, list):
            raise ValueError("secondary must be a list of ServiceInfo")
        if not secondary:
            raise ValueError("secondary must hold at least one ServiceInfo")
        for index, info in enumerate(secondary):
            if not isinstance(info, ServiceInfo):
                raise ValueError(f"secondary[{index}] must be a ServiceInfo")
        for name, value in (
            ("check_interval_ms", check_interval_ms),
            ("failover_threshold", failover_threshold),
            ("switch_back_threshold", switch_back_threshold),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name} must be an int greater than 0")
        self.primary = primary
        self.secondary = list(secondary)
        self.check_interval_ms = check_interval_ms
        self.failover_threshold = failover_threshold
        self.switch_back_threshold = switch_back_threshold

    def __repr__(self) -> str:
        return (
            f"AutoClusterFailover(primary={self.primary!r}, secondary={self.secondary!r}, "
            f"check_interval_ms={self.check_interval_ms!r}, "
            f"failover_threshold={self.failover_threshold!r}, "
            f"switch_back_threshold={self.switch_back_threshold!r})"
        )


async def probe(info: ServiceInfo, limit_s: float) -> bool:
    """True when a TCP connection to the cluster's first address opens
    within ``limit_s``."""
    host, _, port = info.parsed.addresses[0].rpartition(":")
    try:
        async with asyncio.timeout(limit_s):
            _, writer = await asyncio.open_connection(host.strip("[]"), int(port))
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


class FailoverState:
    """The probe decisions of AutoClusterFailover, apart from any I/O."""

    def __init__(self, config: AutoClusterFailover) -> None:
        self.config = config
        self.current = config.primary
        self._failures = 0
        self._primary_good = 0

    async def step(self, reachable: Callable[[ServiceInfo], Awaitable[bool]]) -> ServiceInfo:
        """One round of probes; the ServiceInfo to use after it."""
        cfg = self.config
        if self.current is not cfg.primary:
            if await reachable(cfg.primary):
                self._primary_good += 1
                if self._primary_good >= cfg.switch_back_threshold:
                    self._move(cfg.primary)
                    return self.current
            else:
                self._primary_good = 0
        if await reachable(self.current):
            self._failures = 0
            return self.current
        self._failures += 1
        if self._failures < cfg.failover_threshold:
            return self.current
        for candidate in cfg.secondary:
            if candidate is not self.current and await reachable(candidate):
                self._move(candidate)
                break
        return self.current

    def _move(self, to: ServiceInfo) -> None:
        self.current = to
        self._failures = 0
        self._primary_good = 0


class ClusterSwitch:
    """The client's side of a provider: the current ServiceInfo (readable
    from any thread), updates applied on the client's loop through ``apply``,
    and for AutoClusterFailover the probing task. Owned by the client, which
    calls :meth:`start` on its loop and :meth:`close` when it closes."""

    def __init__(
        self,
        source: ServiceInfoProvider | AutoClusterFailover,
        apply: Callable[[ServiceInfo], Awaitable[None]],
    ) -> None:
        self._source = source
        self._apply = apply
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        if isinstance(source, AutoClusterFailover):
            self._state: FailoverState | None = FailoverState(source)
            self._current = source.primary
        else:
            self._state = None
            initial = source.initial_service_info()
            if not isinstance(initial, ServiceInfo):
                raise ValueError("initial_service_info() must return a ServiceInfo")
            self._current = initial
            source.initialize(self.update)
        self._applied = self._current

    @property
    def current(self) -> ServiceInfo:
        with self._lock:
            return self._current

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Bind to the client's loop (idempotent); start probing if asked to."""
        if self._loop is not None or self._closed:
            return
        self._loop = loop
        if self._state is not None:
            self._spawn(self._probe_loop(self._state))
        if self.current is not self._applied:  # updated before the loop was known
            self._spawn(self._apply_current())

    def update(self, info: ServiceInfo) -> None:
        """The provider's callback: take ``info`` (any thread)."""
        if not isinstance(info, ServiceInfo):
            raise ValueError("a service info update must be a ServiceInfo")
        with self._lock:
            if self._closed or info is self._current:
                return
            self._current = info
            loop = self._loop
        if loop is not None:
            loop.call_soon_threadsafe(self._spawn, self._apply_current())

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        if self._closed:
            coro.close()
            return
        task = asyncio.get_running_loop().create_task(coro, name="pulsar-cluster-switch")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _apply_current(self) -> None:
        info = self.current
        if info is self._applied:
            return
        self._applied = info
        log.info("switching cluster", service_url=info.service_url)
        await self._apply(info)

    async def _probe_loop(self, state: FailoverState) -> None:
        interval = state.config.check_interval_ms / 1000.0
        timeout = min(interval, PROBE_TIMEOUT_S)
        while True:
            await asyncio.sleep(interval)
            chosen = await state.step(lambda info: probe(info, timeout))
            if chosen is not self.current:
                self.update(chosen)

    async def close(self) -> None:
        """Stop probing, wait for a switch in progress, close the provider."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if isinstance(self._source, ServiceInfoProvider):
            try:
                self._source.close()
            except Exception:
                log.exception("service info provider close failed")
