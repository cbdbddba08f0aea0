"""The broker's HTTP side: `/metrics`, health, and (later) the admin REST API.

Health answers 200 "ok" while the broker serves, and 503 with the reason
while it starts or stops or while storage cannot append (a full disk), on
Pulsar's `/admin/v2/brokers/health` and the classic `/status.html`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from aiohttp import web
from prometheus_client import generate_latest

from magnetar.broker.observability.metrics import CONTENT_TYPE_LATEST, BrokerMetrics

# `ready` is the readiness probe: the same answer (serving, storage writable).
HEALTH_PATHS = ("/admin/v2/brokers/health", "/admin/v2/brokers/ready", "/status.html")


def build_app(metrics: BrokerMetrics, problem: Callable[[], str | None]) -> web.Application:
    """`problem()` says what keeps the broker from being healthy (None: nothing)."""

    async def metrics_handler(_request: web.Request) -> web.Response:
        # Samples are read on the loop; the text is built on a worker thread
        # so a large scrape does not hold up publishes for its whole length.
        samples = metrics.snapshot()
        body = await asyncio.get_running_loop().run_in_executor(None, generate_latest, samples)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def health_handler(_request: web.Request) -> web.Response:
        reason = problem()
        if reason is None:
            return web.Response(text="ok", content_type="text/plain")
        return web.Response(text=reason, status=503, content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", metrics_handler)
    app.router.add_get("/metrics/", metrics_handler)
    for path in HEALTH_PATHS:
        app.router.add_get(path, health_handler)
    return app
