"""Authorization (Pulsar's model): superusers may do anything; a tenant's
admin roles administer it and use its topics; other roles get what the
namespace's permissions grant them (`auth_policies.namespace_auth`: role ->
["produce", "consume"]), set at namespace creation or through the
permissions endpoints, or what a topic's own grants give them
(`auth_policies.destination_auth`: topic -> role -> actions; a partition is
covered by its partitioned topic's grants, as in Pulsar)."""

from __future__ import annotations

from magnetar.broker.resources import PulsarResources, ResourceNotFound
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


def topic_grants(policies: dict[str, object], topic: str) -> dict[str, list[str]]:
    """The role -> actions map granted on one topic (by its full name)."""
    auth = policies.get("auth_policies")
    per_topic = auth.get("destination_auth") if isinstance(auth, dict) else None
    grants = per_topic.get(topic) if isinstance(per_topic, dict) else None
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

    async def allowed_on_topic(self, role: str, action: str, topic: TopicName) -> bool:
        """The namespace's grants, else the topic's own (or its partitioned
        topic's, for a partition)."""
        if await self.allowed(role, action, topic.tenant, topic.namespace):
            return True
        try:
            policies = await self._resources.get_policies(topic.tenant, topic.namespace)
        except ResourceNotFound:
            return False
        names = {str(topic), str(topic.partitioned_base)}
        actions = {a for name in names for a in topic_grants(policies, name).get(role, [])}
        return bool(actions) if not action else action in actions

    async def can_produce(self, role: str, topic: TopicName) -> bool:
        return await self.allowed_on_topic(role, PRODUCE, topic)

    async def can_consume(self, role: str, topic: TopicName) -> bool:
        return await self.allowed_on_topic(role, CONSUME, topic)

    async def can_lookup(self, role: str, topic: TopicName) -> bool:
        return await self.allowed_on_topic(role, "", topic)
