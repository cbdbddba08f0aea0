"""The admin REST API (Pulsar admin v2 paths) and the HTTP lookup, on the
broker's HTTP port. Handlers call the service and the same Topic /
Subscription methods the wire uses; nothing here is a second implementation.
"""

from __future__ import annotations

from aiohttp import web

from magnetar.broker.admin import (
    brokers,
    compaction,
    ledger_ops,
    messages,
    namespace_ops,
    namespaces,
    permissions,
    policy_routes,
    properties,
    schemas,
    subscription_policies,
    subscriptions,
    topic_extras,
    topic_ops,
    topics,
)
from magnetar.broker.admin.base import error_middleware
from magnetar.broker.admin.security import security_middleware
from magnetar.broker.auth.authentication import AuthenticationService
from magnetar.broker.service.broker_service import BrokerService


def install(
    app: web.Application,
    service: BrokerService,
    authentication: AuthenticationService | None = None,
) -> None:
    """Add the admin routes, their error handling and security to the HTTP app."""
    app.middlewares.append(error_middleware)
    if authentication is not None or service.authorization is not None:
        app.middlewares.append(security_middleware(authentication, service.authorization))
    # First: on a router that matches in order, {domain}/{tenant}/{namespace}
    # would take brokers/configuration/values and the like.
    app.add_routes(brokers.routes(service))
    app.add_routes(namespaces.routes(service))
    # Before the topic routes: {domain}/{tenant}/{namespace}/{topic}/unload
    # also matches namespaces/{tenant}/{namespace}/{bundle}/unload.
    app.add_routes(namespace_ops.routes(service))
    # Before the topic routes: {domain}/{tenant}/{namespace}/{topic} also matches
    # namespaces/{tenant}/{namespace}/{policy}.
    app.add_routes(policy_routes.namespace_routes(service))
    app.add_routes(properties.routes(service))
    app.add_routes(topics.routes(service))
    app.add_routes(topic_extras.routes(service))
    app.add_routes(ledger_ops.routes(service))
    app.add_routes(policy_routes.topic_routes(service))
    # Before permissions: {topic}/permissions/{role} would take a subscription
    # named "permissions".
    app.add_routes(subscription_policies.routes(service))
    app.add_routes(permissions.routes(service))
    app.add_routes(schemas.routes(service))
    app.add_routes(compaction.routes(service))
    app.add_routes(subscriptions.routes(service))
    app.add_routes(topic_ops.routes(service))
    app.add_routes(messages.routes(service))
