"""Every frame the broker sends is built here.

The hot builders (SEND_RECEIPT, MESSAGE) fill a protobuf object field by
field and skip the generic `_frame` helper: they run once per entry.
"""

from __future__ import annotations

from magnetar.broker.storage.api import Position
from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.errors import ServerError
from magnetar.proto.frames import encode_command, encode_payload_command
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
    # No optional features yet (auth refresh, broker entry metadata,
    # partial producers, topic watchers): an explicit all-false set.
    body.feature_flags.SetInParent()
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


_SEND_RECEIPT = T.SEND_RECEIPT
_MESSAGE = T.MESSAGE


def send_receipt(
    producer_id: int,
    sequence_id: int,
    highest_sequence_id: int,
    position: Position,
    partition: int,
) -> bytes:
    """SEND_RECEIPT for a durable entry (hot path: one per SEND); a dropped
    duplicate's position is (-1, -1) (WIRE 5)."""
    command = pb.BaseCommand(type=_SEND_RECEIPT)
    receipt = command.send_receipt
    receipt.producer_id = producer_id
    receipt.sequence_id = sequence_id
    if highest_sequence_id:
        receipt.highest_sequence_id = highest_sequence_id
    mid = receipt.message_id
    if position.ledger_id < 0:
        mid.ledgerId = to_unsigned64(position.ledger_id)
        mid.entryId = to_unsigned64(position.entry_id)
    else:
        mid.ledgerId = position.ledger_id
        mid.entryId = position.entry_id
    if partition >= 0:
        mid.partition = partition
    return encode_command(command)


def message(
    consumer_id: int,
    position: Position,
    partition: int,
    redelivery_count: int,
    ack_set: list[int] | None,
    epoch: int | None,
    data: bytes,
) -> bytes:
    """MESSAGE around an entry's stored bytes (hot path: one per entry sent)."""
    command = pb.BaseCommand(type=_MESSAGE)
    body = command.message
    body.consumer_id = consumer_id
    mid = body.message_id
    mid.ledgerId = position.ledger_id
    mid.entryId = position.entry_id
    if partition >= 0:
        mid.partition = partition
    if redelivery_count:
        body.redelivery_count = redelivery_count
    if ack_set is not None:
        body.ack_set.extend(ack_set)
    if epoch is not None:
        body.consumer_epoch = epoch
    return encode_payload_command(command, data)


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
