"""Schema commands of one connection: GET_SCHEMA and GET_OR_CREATE_SCHEMA.

Both answer errors inside their own response (error_code): the client does
not match an ERROR frame to these requests (WIRE 18).
"""

from __future__ import annotations

from magnetar.broker import commands
from magnetar.broker.connection.context import CommandContext
from magnetar.broker.errors import BrokerServiceError
from magnetar.broker.resources import ResourceError
from magnetar.broker.schemas.types import (
    from_wire,
    to_wire,
    version_bytes,
    version_from_bytes,
)
from magnetar.broker.service.broker_service import parse_topic
from magnetar.broker.storage.api import StorageError
from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.errors import ServerError
from magnetar.proto.frames import Frame


class SchemaCommands:
    def __init__(self, cnx: CommandContext) -> None:
        self.cnx = cnx

    def handle_get_schema(self, frame: Frame) -> None:
        cmd = frame.command.getSchema
        self.cnx.spawn(self._get_schema(cmd), cmd.request_id, "GET_SCHEMA")

    async def _get_schema(self, cmd: pb.CommandGetSchema) -> None:
        version = version_from_bytes(cmd.schema_version) if cmd.schema_version else None
        try:
            # A schema is the topic's to read: a role needs a grant on its
            # namespace, as for a lookup.
            await self.cnx.authorize("lookup", cmd.topic)
            # The schema id strips -partition-N (WIRE 18).
            found = await self.cnx.service.schemas.get(parse_topic(cmd.topic), version)
        except (BrokerServiceError, ResourceError, StorageError) as exc:
            self.cnx.write(
                commands.get_schema_response(
                    cmd.request_id, code=_code(exc), message=f"GET_SCHEMA failed: {exc}"
                )
            )
            return
        if found is None:
            self.cnx.write(
                commands.get_schema_response(
                    cmd.request_id,
                    code=ServerError.TopicNotFound,
                    message=f"Topic not found or no-schema: {cmd.topic}",
                )
            )
            return
        self.cnx.write(
            commands.get_schema_response(
                cmd.request_id, schema=to_wire(found), version=version_bytes(found.version)
            )
        )

    def handle_get_or_create_schema(self, frame: Frame) -> None:
        cmd = frame.command.getOrCreateSchema
        self.cnx.spawn(self._get_or_create(cmd), cmd.request_id, "GET_OR_CREATE_SCHEMA")

    async def _get_or_create(self, cmd: pb.CommandGetOrCreateSchema) -> None:
        schema = from_wire(cmd.schema)
        try:
            if schema is None:
                raise BrokerServiceError(ServerError.IncompatibleSchema, "no schema given")
            topic = parse_topic(cmd.topic)
            policies = await self.cnx.service.policies.resolve(topic)
            version = await self.cnx.service.schemas.add(
                topic, schema, may_add=policies.allow_auto_update_schema
            )
        except (BrokerServiceError, ResourceError, StorageError) as exc:
            self.cnx.write(
                commands.get_or_create_schema_response(
                    cmd.request_id, code=_code(exc), message=str(exc)
                )
            )
            return
        self.cnx.write(
            commands.get_or_create_schema_response(cmd.request_id, version=version_bytes(version))
        )


def _code(exc: Exception) -> ServerError:
    if isinstance(exc, BrokerServiceError):
        return exc.code
    if isinstance(exc, ResourceError):
        return ServerError.MetadataError
    return ServerError.PersistenceError
