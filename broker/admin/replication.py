"""Geo-replication admin checks (issue 45): a namespace's or topic's
replication clusters must be registered clusters the tenant may use, with
Pulsar's statuses and texts (403 for both, as its admin answers them)."""

from __future__ import annotations

from magnetar.broker.admin.base import HttpError
from magnetar.broker.resources import PulsarResources


async def check_replication_clusters(
    resources: PulsarResources, tenant: str, clusters: object
) -> None:
    """403 for a cluster that is not registered, or that the tenant's
    allowedClusters leaves out."""
    if not isinstance(clusters, list):
        return  # removed (None): nothing to check
    known = set(await resources.clusters())
    allowed = (await resources.get_tenant(tenant)).get("allowedClusters") or []
    for cluster in clusters:
        if cluster not in known:
            raise HttpError(403, f"Invalid cluster id: {cluster}")
        if cluster not in allowed:
            raise HttpError(
                403,
                f"Cluster [{cluster}] is not in the list of allowed clusters list "
                f"for tenant [{tenant}]",
            )
