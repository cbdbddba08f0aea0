"""Lookup commands of one connection: LOOKUP (who serves a topic) and
PARTITIONED_METADATA (how many partitions it has), both authorized as a
lookup of the topic."""

from __future__ import annotations

from magnetar.broker import commands
from magnetar.broker.connection.context import CommandContext
from magnetar.broker.errors import BrokerServiceError
from magnetar.broker.storage.api import StorageError
from magnetar.proto.errors import ServerError
from magnetar.proto.frames import Frame


class LookupCommands:
    def __init__(self, cnx: CommandContext) -> None:
        self.cnx = cnx

    def handle_lookup(self, frame: Frame) -> None:
        cmd = frame.command.lookupTopic
        self.cnx.spawn(
            self._lookup(
                cmd.topic, cmd.request_id, cmd.advertised_listener_name, cmd.authoritative
            ),
            cmd.request_id,
            "LOOKUP",
            eager=True,  # answered from caches: no task needed (broker/eager.py)
        )

    async def _lookup(
        self, topic: str, request_id: int, listener_name: str, authoritative: bool = False
    ) -> None:
        try:
            await self.cnx.authorize("lookup", topic, "Client is not authorized to Perform Lookup")
            url, url_tls, redirect = await self.cnx.service.lookup(
                topic, listener_name, authoritative
            )
        except BrokerServiceError as exc:
            self.cnx.write(commands.lookup_failed(request_id, exc.code, exc.message))
            return
        except StorageError as exc:
            self.cnx.write(commands.lookup_failed(request_id, ServerError.MetadataError, str(exc)))
            return
        self.cnx.write(commands.lookup_connect(request_id, url, url_tls, redirect))
        self.cnx.service.prefetch_topic(topic)  # after the answer is on its way

    def handle_partitioned_metadata(self, frame: Frame) -> None:
        cmd = frame.command.partitionMetadata
        self.cnx.spawn(
            self._partitioned_metadata(cmd.topic, cmd.request_id),
            cmd.request_id,
            "PARTITIONED_METADATA",
            eager=True,
        )

    async def _partitioned_metadata(self, topic: str, request_id: int) -> None:
        try:
            await self.cnx.authorize(
                "lookup", topic, "Client is not authorized to Get Partition Metadata"
            )
            partitions = await self.cnx.service.partitioned_metadata(topic)
        except BrokerServiceError as exc:
            self.cnx.write(commands.partitioned_metadata_failed(request_id, exc.code, exc.message))
            return
        except StorageError as exc:
            self.cnx.write(
                commands.partitioned_metadata_failed(
                    request_id, ServerError.MetadataError, str(exc)
                )
            )
            return
        self.cnx.write(commands.partitioned_metadata(request_id, partitions))
        if partitions == 0:  # not partitioned: the client attaches to this name next
            self.cnx.service.prefetch_topic(topic)
