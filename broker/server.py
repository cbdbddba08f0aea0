"""BrokerServer: start, serve and shut down one broker, in named phases.

Startup: open storage -> start the service -> bind the binary listener ->
bind HTTP; then `started` is set and `port` / `http_port` hold the real ports
(tests bind port 0). Shutdown (first SIGTERM/SIGINT, or `request_shutdown`):
stop accepting -> close topics (clients hear CLOSE_PRODUCER/CLOSE_CONSUMER,
cursors are persisted) -> close connections -> close storage (fsync) -> stop
HTTP, all within `shutdown_timeout_seconds`. A second signal exits at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Literal

import structlog
from aiohttp import web

from magnetar.broker import admin
from magnetar.broker.auth.authentication import AuthenticationService
from magnetar.broker.auth.tls import server_context
from magnetar.broker.config import BrokerConfig
from magnetar.broker.connection.cnx import ServerCnx
from magnetar.broker.connection.limits import ConnectionLimiter
from magnetar.broker.observability.metrics import BrokerMetrics
from magnetar.broker.service.broker_service import BrokerService
from magnetar.broker.storage.api import ManagedLedgerFactory, MetadataStore
from magnetar.broker.storage_setup import open_storage
from magnetar.broker.web import build_app

# aetcd is optional (magnetar[cluster]): cluster modules load in cluster mode only.
if TYPE_CHECKING:
    from magnetar.broker.cluster.member import ClusterMember

log = structlog.get_logger(__name__)

State = Literal["new", "starting", "serving", "stopping", "stopped"]
FORCED_EXIT_CODE = 1


class BrokerServer:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.metrics = BrokerMetrics()
        self.state: State = "new"
        self.port = 0
        self.http_port = 0
        self.service: BrokerService | None = None
        self._factory: ManagedLedgerFactory | None = None
        self._metadata_store: MetadataStore | None = None
        # Cluster mode (config.metadata_url): this broker's bundle ownership.
        self.cluster: ClusterMember | None = None
        self._listener: asyncio.Server | None = None
        self._tls_listener: asyncio.Server | None = None
        self.tls_port = 0
        self.tls_http_port = 0
        self._tls = server_context(config) if config.tls_enabled else None
        self._authentication = (
            AuthenticationService(config) if config.authentication_enabled else None
        )
        self._http_runner: web.AppRunner | None = None
        self._connections: set[ServerCnx] = set()
        self._limiter = (
            ConnectionLimiter(config.max_connections, config.max_connections_per_ip)
            if config.max_connections or config.max_connections_per_ip
            else None
        )
        self._started: asyncio.Event | None = None
        self._stop_requested: asyncio.Event | None = None
        self._signals_seen = 0
        self._signal_loop: asyncio.AbstractEventLoop | None = None

    # ----------------------------------------------------------- properties

    @property
    def started(self) -> asyncio.Event:
        """Set once the broker serves on both ports."""
        if self._started is None:
            self._started = asyncio.Event()
        return self._started

    @property
    def service_url(self) -> str:
        return f"pulsar://{self.config.advertised_host}:{self.port}"

    @property
    def http_url(self) -> str:
        return f"http://{self.config.advertised_host}:{self.http_port}"

    @property
    def http_routes(self) -> list[tuple[str, str]]:
        """(method, path pattern) of every HTTP route served: what the REST
        coverage report compares with Pulsar's API."""
        if self._http_runner is None:
            return []
        found = []
        for route in self._http_runner.app.router.routes():
            info = route.resource.get_info() if route.resource is not None else {}
            pattern = info.get("formatter") or info.get("path")
            if isinstance(pattern, str):
                found.append((route.method, pattern))
        return found

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    def is_healthy(self) -> bool:
        return self.health_problem() is None

    def health_problem(self) -> str | None:
        """What the health endpoint reports: None while all is well."""
        if self.state != "serving":
            return f"not ready: the broker is {self.state}"
        error = self._factory.write_error if self._factory is not None else None
        if error is not None:
            return f"storage is not writable: {error}"
        return None

    # --------------------------------------------------------------- start

    async def start(self) -> None:
        if self.state != "new":
            raise RuntimeError(f"BrokerServer.start() in state {self.state}")
        self.state = "starting"
        try:
            await self._phase("open storage", self._open_storage)
            await self._phase("bind binary listener", self._bind_binary)
            await self._phase("bind http", self._bind_http)
            if self.cluster is not None:
                await self._phase("join cluster", self._join_cluster)
        except BaseException:
            await self.shutdown()
            raise
        self.state = "serving"
        self.metrics.loop_lag.start()
        log.info(
            "broker started",
            service_url=self.service_url,
            http_url=self.http_url,
            data_dir=str(self.config.data_dir),
            sync_policy=self.config.sync_policy,
        )
        self.started.set()

    async def _phase(self, name: str, action: Callable[[], Awaitable[None]]) -> None:
        began = time.perf_counter()
        await action()
        log.debug("phase done", phase=name, seconds=round(time.perf_counter() - began, 4))

    async def _open_storage(self) -> None:
        if self.config.metadata_url:
            from magnetar.broker.cluster.setup import open_cluster_storage

            storage = await open_cluster_storage(self.config, self.metrics.registry)
            self._factory, self._metadata_store, self.cluster = storage
        else:
            self._factory, self._metadata_store = await open_storage(self.config)
        self.service = BrokerService(self.config, self._factory, self._metadata_store, self.metrics)
        if self.cluster is not None:
            self.cluster.attach(self.service)
        await self.service.start()

    async def _join_cluster(self) -> None:
        assert self.cluster is not None and self.service is not None
        await self.cluster.join(
            self.service.service_url, self.service.service_url_tls, self.http_url
        )

    async def _bind_binary(self) -> None:
        loop = asyncio.get_running_loop()
        self._listener = await loop.create_server(
            self._new_connection, self.config.bind, self.config.port, reuse_address=True
        )
        sockets = self._listener.sockets
        self.port = sockets[0].getsockname()[1]
        if self._tls is not None:
            self._tls_listener = await loop.create_server(
                self._new_connection,
                self.config.bind,
                self.config.tls_port,
                reuse_address=True,
                ssl=self._tls,
            )
            self.tls_port = self._tls_listener.sockets[0].getsockname()[1]
        assert self.service is not None
        self.service.set_advertised_port(self.port, self.tls_port or None)

    async def _bind_http(self) -> None:
        app = build_app(self.metrics, self.health_problem)
        assert self.service is not None
        if self.cluster is not None:
            from magnetar.broker.admin import cluster as cluster_admin

            app.middlewares.append(cluster_admin.owner_redirect(self.cluster))
            app.add_routes(cluster_admin.routes(self.cluster))
        admin.install(app, self.service, self._authentication)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        self._http_runner = runner
        # Bind the socket ourselves to learn the real port when asked for port 0.
        sock = socket.create_server((self.config.bind, self.config.http_port))
        self.http_port = sock.getsockname()[1]
        await web.SockSite(runner, sock).start()
        if self._tls is not None:
            tls_sock = socket.create_server((self.config.bind, self.config.tls_http_port))
            self.tls_http_port = tls_sock.getsockname()[1]
            await web.SockSite(runner, tls_sock, ssl_context=self._tls).start()

    def _new_connection(self) -> ServerCnx:
        assert self.service is not None
        cnx = ServerCnx(
            self.service,
            self.config,
            self.metrics,
            on_closed=self._connections.discard,
            limiter=self._limiter,
            authentication=self._authentication,
        )
        self._connections.add(cnx)
        return cnx

    # --------------------------------------------------------------- serve

    async def serve(self, *, install_signal_handlers: bool = True) -> None:
        """Start, serve until asked to stop, shut down."""
        self._stop_requested = asyncio.Event()
        if install_signal_handlers:
            self._install_signal_handlers()
        try:
            await self.start()
            await self._stop_requested.wait()
        finally:
            await self.shutdown()
            self._remove_signal_handlers()

    def request_shutdown(self) -> None:
        if self._stop_requested is None:
            self._stop_requested = asyncio.Event()
        self._stop_requested.set()

    def _install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_signal, sig)
        self._signal_loop = loop

    def _remove_signal_handlers(self) -> None:
        if self._signal_loop is not None:
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._signal_loop.remove_signal_handler(sig)
            self._signal_loop = None

    def _on_signal(self, sig: signal.Signals) -> None:
        self._signals_seen += 1
        if self._signals_seen > 1:
            log.warning("second signal: exiting now", signal=sig.name)
            os._exit(FORCED_EXIT_CODE)
        log.info("signal received: shutting down", signal=sig.name)
        self.request_shutdown()

    # ------------------------------------------------------------ shutdown

    async def shutdown(self) -> None:
        """Graceful stop, bounded by shutdown_timeout_seconds. Idempotent."""
        if self.state in ("stopping", "stopped"):
            return
        self.state = "stopping"
        deadline = time.monotonic() + self.config.shutdown_timeout_seconds
        phases: list[tuple[str, Callable[[], Awaitable[None]]]] = [
            ("stop accepting", self._stop_accepting),
            ("leave cluster", self._leave_cluster),
            ("close topics", self._close_topics),
            ("close connections", self._close_connections),
            ("close storage", self._close_storage),
            ("stop http", self._stop_http),
            ("stop loop lag sampling", self.metrics.loop_lag.close),
        ]
        for name, action in phases:
            remaining = max(deadline - time.monotonic(), 0.1)
            try:
                await asyncio.wait_for(self._phase(name, action), remaining)
            except TimeoutError:
                log.warning("shutdown phase timed out", phase=name)
            except Exception:
                log.exception("shutdown phase failed", phase=name)
        self.state = "stopped"
        log.info("broker stopped")

    async def _stop_accepting(self) -> None:
        for listener in (self._listener, self._tls_listener):
            if listener is not None:
                listener.close()

    async def _leave_cluster(self) -> None:
        # Bundles are handed back (topics closed, keys released) before the
        # topics close, so clients reconnect to the brokers that stay.
        if self.cluster is not None:
            await self.cluster.close()

    async def _close_topics(self) -> None:
        if self.service is not None:
            await self.service.close()

    async def _close_connections(self) -> None:
        connections = list(self._connections)
        for cnx in connections:
            cnx.close()
        await asyncio.gather(*(c.wait_closed() for c in connections))
        for listener in (self._listener, self._tls_listener):
            if listener is not None:
                with contextlib.suppress(Exception):
                    await listener.wait_closed()
        self._listener = self._tls_listener = None

    async def _close_storage(self) -> None:
        if self._factory is not None:
            await self._factory.close()
            self._factory = None
        if self._metadata_store is not None:
            await self._metadata_store.close()
            self._metadata_store = None

    async def _stop_http(self) -> None:
        if self._http_runner is not None:
            await self._http_runner.cleanup()
            self._http_runner = None
