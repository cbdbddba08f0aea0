"""Automatic topic creation: whether a topic used before it exists is made,
and as what (the namespace's autoTopicCreation override, else the broker's
allowAutoTopicCreation settings), as in Pulsar."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from magnetar.broker.config import BrokerConfig
from magnetar.broker.policies.catalog import AUTO_TOPIC_CREATION
from magnetar.broker.resources import PulsarResources, ResourceNotFound
from magnetar.proto.naming import TopicName


class AutoCreation:
    def __init__(self, resources: PulsarResources, config: BrokerConfig) -> None:
        self._resources = resources
        self._config = config

    async def rule(self, name: TopicName) -> tuple[bool, str, int]:
        """(allowed, topic type, partitions) for a topic created by being
        used: the namespace's autoTopicCreation override, else the broker's."""
        override = None
        with contextlib.suppress(ResourceNotFound):
            policies = await self._resources.get_policies(name.tenant, name.namespace)
            found = policies.get(AUTO_TOPIC_CREATION.namespace_field or "")
            override = found if isinstance(found, dict) else None
        return self._rule(override)

    def _rule(self, override: Mapping[str, Any] | None) -> tuple[bool, str, int]:
        if override is not None:
            return (
                bool(override.get("allowAutoTopicCreation")),
                str(override.get("topicType", "non-partitioned")),
                int(override.get("defaultNumPartitions") or 1),
            )
        config = self._config
        return (
            config.allow_auto_topic_creation,
            config.allow_auto_topic_creation_type,
            config.default_num_partitions,
        )

    async def may_create(
        self, name: TopicName, create: bool, override: Mapping[str, Any] | None
    ) -> bool:
        """Whether a request that would create `name` (`create`) may, with
        the namespace's override already read (the topic's policies)."""
        if not create:
            return False
        index = name.partition_index
        if index >= 0:
            # A partition of a declared partitioned topic may always be
            # created, one past its count never (as in Pulsar: a client that
            # thinks the topic has more partitions gets TopicNotFound).
            partitions = await self._resources.get_partitions(name.partitioned_base)
            if partitions:
                return index < partitions
        return self._rule(override)[0]
