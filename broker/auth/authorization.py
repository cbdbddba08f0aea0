"""Authorization (Pulsar's model): superusers may do anything; a tenant's
admin roles administer it and use its topics; other roles get what the
namespace's permissions grant them (`auth_policies.namespace_auth`: role ->
["produce", "consume"]), set at namespace creation or through the
permissions endpoints."""

from __future__ import annotations

from magnetar.broker.service.resources import PulsarResources, ResourceNotFound
from magnetar.proto.naming import TopicName

PRODUCE = "produce"
CONSUME = "consume"
ACTIONS = (PRODUCE, CONSUME)


def namespace_grants(policies: dict[str, object]) -> dict[str, list[str]]:
    """The role -> actions map of a namespace's policies."""
    auth = policies.get("auth_policies")
    grants = auth.get("namespace_auth") if isinstance(auth, dict) else None
    if not isinstance(grants, dict):
        return {}
    return {str(role): [str(a) for a in actions] for role, actions in grants.items()}


class AuthorizationService:
    def __init__(self, resources: PulsarResources, superusers: set[str]) -> None:
        self._resources = resources
        self.superusers = superusers

    def is_superuser(self, role: str) -> bool:
        return role in self.superusers

    async def is_tenant_admin(self, role: str, tenant: str) -> bool:
        if self.is_superuser(role):
            return True
        try:
            info = await self._resources.get_tenant(tenant)
        except ResourceNotFound:
            return False
        admins = info.get("adminRoles")
        return isinstance(admins, list) and role in admins

    async def allowed(self, role: str, action: str, tenant: str, namespace: str) -> bool:
        """May `role` produce / consume in the namespace (any action if action is "")."""
        if await self.is_tenant_admin(role, tenant):
            return True
        try:
            policies = await self._resources.get_policies(tenant, namespace)
        except ResourceNotFound:
            return False
        actions = namespace_grants(policies).get(role, [])
        return bool(actions) if not action else action in actions

    async def can_produce(self, role: str, topic: TopicName) -> bool:
        return await self.allowed(role, PRODUCE, topic.tenant, topic.namespace)

    async def can_consume(self, role: str, topic: TopicName) -> bool:
        return await self.allowed(role, CONSUME, topic.tenant, topic.namespace)

    async def can_lookup(self, role: str, topic: TopicName) -> bool:
        return await self.allowed(role, "", topic.tenant, topic.namespace)
