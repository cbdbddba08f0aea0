"""SchemaRegistry: per-topic schema versions (partitions share their parent's),
versioned from 0, one JSON document per topic in the metadata store.

Producers register or find their schema; consumers check theirs (Pulsar's
rules: a consumer schema must read the latest version); the admin API reads,
posts and deletes through the same methods.
"""

from __future__ import annotations

import json
from typing import Any

import structlog

from magnetar.broker.policies.resolver import PolicyResolver
from magnetar.broker.schemas.compatibility import (
    IncompatibleSchemaError,
    Strategy,
    check,
    validate,
)
from magnetar.broker.schemas.types import SchemaData, SchemaVersion, now_ms
from magnetar.broker.storage.api import BadVersion, MetadataStore
from magnetar.proto.naming import TopicName

log = structlog.get_logger(__name__)

SCHEMAS = "/schemas"


def schema_id(topic: TopicName) -> str:
    """Pulsar's schema id: tenant/namespace/local name of the base topic
    (both domains and every partition share it)."""
    base = topic.partitioned_base if topic.partition_index >= 0 else topic
    return f"{base.tenant}/{base.namespace}/{base.local_name}"


class SchemaRegistry:
    def __init__(self, store: MetadataStore, policies: PolicyResolver) -> None:
        self._store = store
        self._policies = policies

    def _path(self, topic: TopicName) -> str:
        return f"{SCHEMAS}/{schema_id(topic)}"

    async def _load(self, topic: TopicName) -> tuple[list[SchemaVersion], int]:
        got = await self._store.get(self._path(topic))
        if got is None:
            return [], -1
        doc: dict[str, Any] = json.loads(got.value)
        return [SchemaVersion.from_json(v) for v in doc.get("versions", [])], got.stat.version

    async def history(self, topic: TopicName) -> list[SchemaVersion]:
        """Every stored version, deleted markers included, oldest first."""
        return (await self._load(topic))[0]

    @staticmethod
    def _live(history: list[SchemaVersion]) -> list[SchemaVersion]:
        """The versions after the last deletion: the ones in force."""
        for index in range(len(history) - 1, -1, -1):
            if history[index].deleted:
                return history[index + 1 :]
        return history

    async def live(self, topic: TopicName) -> list[SchemaVersion]:
        return self._live(await self.history(topic))

    async def get(self, topic: TopicName, version: int | None = None) -> SchemaVersion | None:
        """A version (None: the latest) that is in force; None if there is none."""
        live = await self.live(topic)
        if version is None:
            return live[-1] if live else None
        return next((v for v in live if v.version == version), None)

    async def strategy(self, topic: TopicName) -> Strategy:
        """Topic policy, then namespace policy, then the broker default."""
        return (await self._policies.resolve(topic)).schema_compatibility

    async def _append(self, topic: TopicName, entry: SchemaData | None) -> int:
        """Store the next version (None: a deletion marker); its version number."""
        path = self._path(topic)
        while True:
            history, stat_version = await self._load(topic)
            version = history[-1].version + 1 if history else 0
            history.append(SchemaVersion(version, entry, now_ms()))
            body = json.dumps({"versions": [v.to_json() for v in history]}).encode()
            try:
                await self._store.put(path, body, expected_version=stat_version)
            except BadVersion:
                continue  # someone else added a version meanwhile; decide again
            return version

    async def add(self, topic: TopicName, schema: SchemaData, *, may_add: bool = True) -> int:
        """A producer's (or the admin's) schema: its existing version when the
        same definition is in force, else a new version if the strategy allows
        and `may_add` (a client's schema under isAllowAutoUpdateSchema false
        must already be registered)."""
        while True:
            live = await self.live(topic)
            for stored in live:
                assert stored.schema is not None
                if stored.schema.same_definition(schema):
                    return stored.version
            if not may_add:
                raise IncompatibleSchemaError(
                    f"schema not found on {topic} and schema auto-update is disabled"
                    " (isAllowAutoUpdateSchema)"
                )
            strategy = await self.strategy(topic)
            check(schema, [v.schema for v in live if v.schema is not None], strategy)
            if not live:
                validate(schema)
            version = await self._add_if_unchanged(topic, schema, len(live))
            if version is not None:
                log.info(
                    "schema registered",
                    topic=schema_id(topic),
                    version=version,
                    type=schema.type.name,
                    strategy=strategy.name,
                )
                return version

    async def _add_if_unchanged(
        self, topic: TopicName, schema: SchemaData, live_count: int
    ) -> int | None:
        history, stat_version = await self._load(topic)
        if len(self._live(history)) != live_count:
            return None
        version = history[-1].version + 1 if history else 0
        history.append(SchemaVersion(version, schema, now_ms()))
        body = json.dumps({"versions": [v.to_json() for v in history]}).encode()
        try:
            await self._store.put(self._path(topic), body, expected_version=stat_version)
        except BadVersion:
            return None
        return version

    async def check_consumer(self, topic: TopicName, schema: SchemaData) -> None:
        """A consumer's schema: registered when the topic has none; otherwise
        it must read the latest version (Pulsar's consumer rule)."""
        live = await self.live(topic)
        if not live:
            await self.add(topic, schema)
            return
        schemas = [v.schema for v in live if v.schema is not None]
        if any(s.same_definition(schema) for s in schemas):
            return
        strategy = await self.strategy(topic)
        if strategy in (Strategy.BACKWARD, Strategy.FORWARD, Strategy.FULL):
            check(schema, schemas[-1:], Strategy.BACKWARD)
        elif strategy is Strategy.FORWARD_TRANSITIVE:
            check(schema, schemas, Strategy.BACKWARD_TRANSITIVE)
        else:
            check(schema, schemas, strategy)

    async def is_compatible(self, topic: TopicName, schema: SchemaData) -> tuple[bool, Strategy]:
        """The admin compatibility check: would `add` accept it?"""
        strategy = await self.strategy(topic)
        live = await self.live(topic)
        schemas = [v.schema for v in live if v.schema is not None]
        if any(s.same_definition(schema) for s in schemas):
            return True, strategy
        try:
            check(schema, schemas, strategy)
        except IncompatibleSchemaError:
            return False, strategy
        return True, strategy

    async def delete(self, topic: TopicName) -> int | None:
        """Delete every version in force (a marker version); None if none was."""
        if not await self.live(topic):
            return None
        version = await self._append(topic, None)
        log.info("schema deleted", topic=schema_id(topic), version=version)
        return version
