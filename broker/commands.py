"""Every frame the broker sends is built here.

The hot ones (SEND_RECEIPT, MESSAGE) run once per entry: proto.fastpath
writes their bytes directly instead of building a protobuf object.
"""

from __future__ import annotations

from magnetar.broker.storage.api import Position
from magnetar.proto import fastpath, pulsar_api_pb2 as pb
from magnetar.proto.errors import ServerError
from magnetar.proto.frames import encode_command
from magnetar.proto.ids import to_unsigned64

T = pb.BaseCommand


def _frame(command_type: int, field: str, **values: object) -> bytes:
    command = pb.BaseCommand(type=command_type)  # type: ignore[arg-type]
    body = getattr(command, field)
    for key, value in values.items():
        if value is not None:
            setattr(body, key, value)
    # Bodies without fields still need to be present on the wire.
    body.SetInParent()
    return encode_command(command)


def error(request_id: int, code: ServerError, message: str) -> bytes:
    return _frame(T.ERROR, "error", request_id=request_id, error=int(code), message=message)


def success(request_id: int) -> bytes:
    return _frame(T.SUCCESS, "success", request_id=request_id)


def ping() -> bytes:
    return _frame(T.PING, "ping")


def pong() -> bytes:
    return _frame(T.PONG, "pong")


def connected(server_version: str, protocol_version: int, max_message_size: int) -> bytes:
    command = pb.BaseCommand(type=T.CONNECTED)
    body = command.connected
    body.server_version = server_version
    body.protocol_version = protocol_version
    body.max_message_size = max_message_size
    # Topic list watchers are offered (topic_watchers.py); auth refresh goes
    # by AUTH_CHALLENGE whatever the flag; no broker entry metadata and no
    # partial producers.
    body.feature_flags.supports_topic_watchers = True
    return encode_command(command)


def auth_challenge(server_version: str, protocol_version: int, method: str) -> bytes:
    """Ask a client to authenticate again (its credentials expired)."""
    command = pb.BaseCommand(type=T.AUTH_CHALLENGE)
    body = command.authChallenge
    body.server_version = server_version
    body.protocol_version = protocol_version
    body.challenge.auth_method_name = method
    body.challenge.auth_data = b"refresh"  # Pulsar's refresh marker
    return encode_command(command)


def producer_success(
    request_id: int,
    producer_name: str,
    last_sequence_id: int = -1,
    *,
    ready: bool = True,
    schema_version: bytes | None = None,
) -> bytes:
    """PRODUCER_SUCCESS; `ready=False` keeps a WaitForExclusive request pending (WIRE 6)."""
    return _frame(
        T.PRODUCER_SUCCESS,
        "producer_success",
        request_id=request_id,
        producer_name=producer_name,
        last_sequence_id=last_sequence_id,
        producer_ready=ready,
        schema_version=schema_version,
    )


def close_producer(producer_id: int, request_id: int = 0) -> bytes:
    return _frame(
        T.CLOSE_PRODUCER, "close_producer", producer_id=producer_id, request_id=request_id
    )


def close_consumer(consumer_id: int, request_id: int = 0) -> bytes:
    return _frame(
        T.CLOSE_CONSUMER, "close_consumer", consumer_id=consumer_id, request_id=request_id
    )


def send_error(producer_id: int, sequence_id: int, code: ServerError, message: str) -> bytes:
    return _frame(
        T.SEND_ERROR,
        "send_error",
        producer_id=producer_id,
        sequence_id=sequence_id,
        error=int(code),
        message=message,
    )


def send_receipt(
    producer_id: int,
    sequence_id: int,
    highest_sequence_id: int,
    position: Position,
    partition: int,
) -> bytes:
    """SEND_RECEIPT for a durable entry (hot path: one per SEND); a dropped
    duplicate's position is (-1, -1), sent as unsigned 64-bit (WIRE 5)."""
    return fastpath.send_receipt(
        producer_id, sequence_id, highest_sequence_id, position[0], position[1], partition
    )


# MESSAGE, one per dispatched entry: the header and metadata-prefix bytes
# for (consumer id, ledger, entry, partition, redelivery count, ack set,
# epoch, stored entry bytes), written straight by proto.fastpath; the
# connection joins a loop turn's parts into one transport write.
message_parts = fastpath.message_parts


def partitioned_metadata(request_id: int, partitions: int) -> bytes:
    Lookup = pb.CommandPartitionedTopicMetadataResponse
    return _frame(
        T.PARTITIONED_METADATA_RESPONSE,
        "partitionMetadataResponse",
        request_id=request_id,
        partitions=partitions,
        response=Lookup.Success,
    )


def partitioned_metadata_failed(request_id: int, code: ServerError, message: str) -> bytes:
    Lookup = pb.CommandPartitionedTopicMetadataResponse
    return _frame(
        T.PARTITIONED_METADATA_RESPONSE,
        "partitionMetadataResponse",
        request_id=request_id,
        response=Lookup.Failed,
        error=int(code),
        message=message,
    )


def lookup_connect(request_id: int, url: str, url_tls: str, redirect: bool = False) -> bytes:
    """Connect to the URLs, or (redirect) send the LOOKUP there, authoritative."""
    Lookup = pb.CommandLookupTopicResponse
    return _frame(
        T.LOOKUP_RESPONSE,
        "lookupTopicResponse",
        request_id=request_id,
        brokerServiceUrl=url,
        brokerServiceUrlTls=url_tls,
        response=Lookup.Redirect if redirect else Lookup.Connect,
        authoritative=True,
    )


def lookup_failed(request_id: int, code: ServerError, message: str) -> bytes:
    Lookup = pb.CommandLookupTopicResponse
    return _frame(
        T.LOOKUP_RESPONSE,
        "lookupTopicResponse",
        request_id=request_id,
        response=Lookup.Failed,
        error=int(code),
        message=message,
    )


def ack_response(
    consumer_id: int, request_id: int, code: ServerError | None, message: str
) -> bytes:
    return _frame(
        T.ACK_RESPONSE,
        "ackResponse",
        consumer_id=consumer_id,
        request_id=request_id,
        error=None if code is None else int(code),
        message=message or None,
    )


def active_consumer_change(consumer_id: int, is_active: bool) -> bytes:
    return _frame(
        T.ACTIVE_CONSUMER_CHANGE,
        "active_consumer_change",
        consumer_id=consumer_id,
        is_active=is_active,
    )


def _message_id(
    out: pb.MessageIdData, position: Position, partition: int, batch_index: int = -1
) -> None:
    out.ledgerId = to_unsigned64(position.ledger_id)
    out.entryId = to_unsigned64(position.entry_id)
    if partition >= 0:
        out.partition = partition
    if batch_index >= 0:
        out.batch_index = batch_index


def last_message_id(
    request_id: int,
    last: Position,
    batch_index: int,
    mark_delete: Position,
    partition: int,
) -> bytes:
    command = pb.BaseCommand(type=T.GET_LAST_MESSAGE_ID_RESPONSE)
    body = command.getLastMessageIdResponse
    body.request_id = request_id
    _message_id(body.last_message_id, last, partition, batch_index)
    _message_id(body.consumer_mark_delete_position, mark_delete, partition)
    return encode_command(command)


def topics_of_namespace(
    request_id: int,
    topics: list[str],
    *,
    filtered: bool = False,
    topics_hash: str = "",
    changed: bool = True,
) -> bytes:
    command = pb.BaseCommand(type=T.GET_TOPICS_OF_NAMESPACE_RESPONSE)
    body = command.getTopicsOfNamespaceResponse
    body.request_id = request_id
    body.topics.extend(topics)
    body.filtered = filtered
    if topics_hash:
        body.topics_hash = topics_hash
    body.changed = changed
    return encode_command(command)


def watch_topic_list_success(
    request_id: int, watcher_id: int, topics: list[str], topics_hash: str
) -> bytes:
    command = pb.BaseCommand(type=T.WATCH_TOPIC_LIST_SUCCESS)
    body = command.watchTopicListSuccess
    body.request_id = request_id
    body.watcher_id = watcher_id
    body.topic.extend(topics)
    body.topics_hash = topics_hash
    return encode_command(command)


def watch_topic_update(
    watcher_id: int, new_topics: list[str], deleted_topics: list[str], topics_hash: str
) -> bytes:
    command = pb.BaseCommand(type=T.WATCH_TOPIC_UPDATE)
    body = command.watchTopicUpdate
    body.watcher_id = watcher_id
    body.new_topics.extend(new_topics)
    body.deleted_topics.extend(deleted_topics)
    body.topics_hash = topics_hash
    return encode_command(command)


def consumer_stats(
    request_id: int, *, name: str, permits: int, unacked: int, backlog: int, type_name: str
) -> bytes:
    command = pb.BaseCommand(type=T.CONSUMER_STATS_RESPONSE)
    body = command.consumerStatsResponse
    body.request_id = request_id
    body.consumerName = name
    body.availablePermits = max(permits, 0)
    body.unackedMessages = unacked
    body.msgBacklog = backlog
    body.type = type_name
    return encode_command(command)


def get_schema_response(
    request_id: int,
    *,
    schema: pb.Schema | None = None,
    version: bytes = b"",
    code: ServerError | None = None,
    message: str = "",
) -> bytes:
    """GET_SCHEMA's answer: the schema, or an error in error_code (WIRE 18)."""
    command = pb.BaseCommand(type=T.GET_SCHEMA_RESPONSE)
    body = command.getSchemaResponse
    body.request_id = request_id
    if code is not None:
        body.error_code = int(code)  # type: ignore[assignment]
        body.error_message = message
    if schema is not None:
        body.schema.CopyFrom(schema)
        body.schema_version = version
    return encode_command(command)


def get_or_create_schema_response(
    request_id: int, *, version: bytes = b"", code: ServerError | None = None, message: str = ""
) -> bytes:
    command = pb.BaseCommand(type=T.GET_OR_CREATE_SCHEMA_RESPONSE)
    body = command.getOrCreateSchemaResponse
    body.request_id = request_id
    if code is not None:
        body.error_code = int(code)  # type: ignore[assignment]
        body.error_message = message
    else:
        body.schema_version = version
    return encode_command(command)


def reached_end_of_topic(consumer_id: int) -> bytes:
    return _frame(T.REACHED_END_OF_TOPIC, "reachedEndOfTopic", consumer_id=consumer_id)
