"""Admin v2: clusters, tenants and namespaces (Pulsar's paths and JSON)."""

from __future__ import annotations

from aiohttp import web

from magnetar.broker.admin.base import HttpError, json_body, no_content
from magnetar.broker.service.broker_service import BrokerService


def routes(service: BrokerService) -> list[web.RouteDef]:
    resources = service.resources

    def _object(value: object, what: str) -> dict[str, object]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise HttpError(400, f"{what} must be a JSON object")
        return value

    async def list_clusters(_request: web.Request) -> web.Response:
        return web.json_response(await resources.clusters())

    async def get_cluster(request: web.Request) -> web.Response:
        return web.json_response(await resources.get_cluster(request.match_info["cluster"]))

    async def put_cluster(request: web.Request) -> web.Response:
        data = _object(await json_body(request), "cluster data")
        await resources.put_cluster(request.match_info["cluster"], data)
        return no_content()

    async def update_cluster(request: web.Request) -> web.Response:
        data = _object(await json_body(request), "cluster data")
        await resources.update_cluster(request.match_info["cluster"], data)
        return no_content()

    async def delete_cluster(request: web.Request) -> web.Response:
        await resources.delete_cluster(request.match_info["cluster"])
        return no_content()

    async def list_tenants(_request: web.Request) -> web.Response:
        return web.json_response(await resources.tenants())

    async def get_tenant(request: web.Request) -> web.Response:
        return web.json_response(await resources.get_tenant(request.match_info["tenant"]))

    async def put_tenant(request: web.Request) -> web.Response:
        info = _object(await json_body(request), "tenant info")
        await resources.create_tenant(request.match_info["tenant"], info)
        return no_content()

    async def post_tenant(request: web.Request) -> web.Response:
        info = _object(await json_body(request), "tenant info")
        await resources.update_tenant(request.match_info["tenant"], info)
        return no_content()

    async def delete_tenant(request: web.Request) -> web.Response:
        await resources.delete_tenant(request.match_info["tenant"])
        return no_content()

    async def list_namespaces(request: web.Request) -> web.Response:
        return web.json_response(await resources.namespaces(request.match_info["tenant"]))

    async def get_namespace(request: web.Request) -> web.Response:
        info = request.match_info
        return web.json_response(await resources.get_policies(info["tenant"], info["namespace"]))

    async def put_namespace(request: web.Request) -> web.Response:
        info = request.match_info
        policies = _object(await json_body(request), "namespace policies")
        await resources.create_namespace(info["tenant"], info["namespace"], policies)
        return no_content()

    async def namespace_topics(request: web.Request) -> web.Response:
        """The HTTP form of GET_TOPICS_OF_NAMESPACE (pattern consumers over HTTP)."""
        info = request.match_info
        mode = request.query.get("mode", "PERSISTENT").upper()
        domains = {
            "PERSISTENT": ("persistent",),
            "NON_PERSISTENT": ("non-persistent",),
            "ALL": ("persistent", "non-persistent"),
        }.get(mode)
        if domains is None:
            raise HttpError(400, f"unknown mode {mode!r} (PERSISTENT, NON_PERSISTENT, ALL)")
        namespace = f"{info['tenant']}/{info['namespace']}"
        return web.json_response(await service.topics_of_namespace(namespace, domains))

    async def delete_namespace(request: web.Request) -> web.Response:
        info = request.match_info
        tenant, namespace = info["tenant"], info["namespace"]
        await resources.get_policies(tenant, namespace)
        topics = await service.namespace_topics(tenant, namespace)
        if topics:
            raise HttpError(412, f"namespace {tenant}/{namespace} still has {len(topics)} topic(s)")
        await resources.delete_namespace(tenant, namespace)
        return no_content()

    async def unload_namespace(request: web.Request) -> web.Response:
        """Close every loaded topic of the namespace (Pulsar's namespace
        unload); clients are told, look their topics up again and load them."""
        info = request.match_info
        tenant, namespace = info["tenant"], info["namespace"]
        await resources.get_policies(tenant, namespace)  # 404 when there is none
        await service.unload_topics(lambda n: n.tenant == tenant and n.namespace == namespace)
        return no_content()

    base = "/admin/v2"
    return [
        web.get(f"{base}/clusters", list_clusters),
        web.get(f"{base}/clusters/{{cluster}}", get_cluster),
        web.put(f"{base}/clusters/{{cluster}}", put_cluster),
        web.post(f"{base}/clusters/{{cluster}}", update_cluster),
        web.delete(f"{base}/clusters/{{cluster}}", delete_cluster),
        web.get(f"{base}/tenants", list_tenants),
        web.get(f"{base}/tenants/{{tenant}}", get_tenant),
        web.put(f"{base}/tenants/{{tenant}}", put_tenant),
        web.post(f"{base}/tenants/{{tenant}}", post_tenant),
        web.delete(f"{base}/tenants/{{tenant}}", delete_tenant),
        web.get(f"{base}/namespaces/{{tenant}}", list_namespaces),
        web.get(f"{base}/namespaces/{{tenant}}/{{namespace}}", get_namespace),
        web.put(f"{base}/namespaces/{{tenant}}/{{namespace}}", put_namespace),
        web.delete(f"{base}/namespaces/{{tenant}}/{{namespace}}", delete_namespace),
        web.get(f"{base}/namespaces/{{tenant}}/{{namespace}}/topics", namespace_topics),
        web.put(f"{base}/namespaces/{{tenant}}/{{namespace}}/unload", unload_namespace),
    ]
