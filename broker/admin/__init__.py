"""The admin REST API (Pulsar admin v2 paths) and the HTTP lookup, on the
broker's HTTP port. Handlers call the service and the same Topic /
Subscription methods the wire uses; nothing here is a second implementation.
"""

from __future__ import annotations

from aiohttp import web

from magnetar.broker.admin import namespaces, policies, topics
from magnetar.broker.admin.base import error_middleware
from magnetar.broker.service import BrokerService


def install(app: web.Application, service: BrokerService) -> None:
    """Add the admin routes and their error handling to the HTTP app."""
    app.middlewares.append(error_middleware)
    app.add_routes(namespaces.routes(service))
    app.add_routes(topics.routes(service))
    app.add_routes(policies.routes(service))
