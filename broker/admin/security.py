"""HTTP authentication and authorization for the admin API and the HTTP
lookup, with the same providers and rules as the binary protocol. Both
refusals are 401, as Pulsar's web resources answer them (its C++ client's
tests check for it).
/metrics and the health endpoints stay open (Prometheus, load balancers)."""

from __future__ import annotations

import structlog
from aiohttp import web
from aiohttp.typedefs import Middleware

from magnetar.broker.admin.base import Handler, error_response
from magnetar.broker.auth.authentication import AuthenticationFailed, AuthenticationService
from magnetar.broker.auth.authorization import AuthorizationService
from magnetar.broker.auth.tls import peer_common_name
from magnetar.proto.naming import InvalidTopicName, TopicName

log = structlog.get_logger(__name__)

OPEN = ("/metrics", "/status.html", "/admin/v2/brokers/health", "/admin/v2/brokers/ready")


async def permitted(authz: AuthorizationService, role: str, method: str, path: str) -> bool:
    """Pulsar's rules, by path: lookups need a permission on the namespace,
    reading lists too; changing a tenant's namespaces and topics takes a
    tenant admin; clusters and tenants themselves take a superuser."""
    parts = path.strip("/").split("/")
    read = method in ("GET", "HEAD")
    if parts[:3] == ["lookup", "v2", "topic"] and len(parts) >= 7:
        try:  # a topic's own grants allow its lookup too
            topic = TopicName.parse(f"{parts[3]}://{parts[4]}/{parts[5]}/{parts[6]}")
        except InvalidTopicName:
            return await authz.allowed(role, "", parts[4], parts[5])
        return await authz.allowed_on_topic(role, "", topic)
    if parts[:2] != ["admin", "v2"] or len(parts) < 3:
        return authz.is_superuser(role)
    kind = parts[2]
    if kind == "clusters":
        return read or authz.is_superuser(role)
    if kind == "tenants":
        if len(parts) >= 4 and read:
            return await authz.is_tenant_admin(role, parts[3])
        return authz.is_superuser(role)
    if kind == "namespaces" and len(parts) >= 4:
        if read and len(parts) >= 6 and parts[5] == "topics":
            return await authz.allowed(role, "", parts[3], parts[4])
        return await authz.is_tenant_admin(role, parts[3])
    if kind == "schemas" and len(parts) >= 5 and read:
        # GET_SCHEMA is a topic operation a producer or consumer may do.
        return await authz.allowed(role, "", parts[3], parts[4])
    if kind in ("persistent", "non-persistent", "schemas") and len(parts) >= 5:
        if read:  # topic lists, partitioned metadata, stats
            return await authz.allowed(role, "", parts[3], parts[4])
        return await authz.is_tenant_admin(role, parts[3])
    return authz.is_superuser(role)


def security_middleware(
    authentication: AuthenticationService | None, authorization: AuthorizationService | None
) -> Middleware:
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in OPEN:
            return await handler(request)
        role = ""
        if authentication is not None:
            transport = request.transport
            ssl_object = transport.get_extra_info("ssl_object") if transport else None
            try:
                role = authentication.authenticate_http(
                    request.headers.get("Authorization"), peer_common_name(ssl_object)
                )
            except AuthenticationFailed as exc:
                log.warning(
                    "HTTP authentication failed",
                    remote=request.remote,
                    path=request.path,
                    reason=str(exc),
                )
                return error_response(401, f"authentication failed: {exc}")
        if authorization is not None and not await permitted(
            authorization, role, request.method, request.path
        ):
            return error_response(
                401, f"role {role!r} is not authorized to {request.method} {request.path}"
            )
        return await handler(request)

    return middleware
