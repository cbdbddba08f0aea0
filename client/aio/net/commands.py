"""Every command the client sends is built here.

One function per command, returning the Command* body for a connection's
`send_command` / `request` (which frame it with `encode`), or the frame bytes
where the client writes them itself (PING, PONG, and SEND on the hot path).
Fields are set exactly as the official client sets them: an optional field
left out here is absent on the wire, not its default.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from google.protobuf.message import Message

from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.frames import Payload, encode_command, encode_payload_command, wrap
from magnetar.proto.ids import MessageId, to_unsigned64

T = pb.BaseCommand
CLIENT_VERSION = "magnetar-python-0.1.0"
PROTOCOL_VERSION = 20
_ACK = pb.CommandAck


def encode(body: Message) -> bytes:
    """The frame for one Command* body (wrapped in its BaseCommand)."""
    return encode_command(wrap(body))


def _key_values(values: Mapping[str, str]) -> list[pb.KeyValue]:
    # Sorted: the same properties always give the same bytes.
    return [pb.KeyValue(key=k, value=v) for k, v in sorted(values.items())]


# -- connection ------------------------------------------------------------


def connect(auth_method: str = "", auth_data: bytes = b"") -> pb.CommandConnect:
    command = pb.CommandConnect(client_version=CLIENT_VERSION, protocol_version=PROTOCOL_VERSION)
    # AUTH_CHALLENGE is answered: expiring credentials are refreshed in place
    # instead of the connection being closed.
    command.feature_flags.supports_auth_refresh = True
    if auth_method:
        command.auth_method_name = auth_method
        command.auth_data = auth_data
    return command


def auth_response(auth_method: str, auth_data: bytes) -> pb.CommandAuthResponse:
    return pb.CommandAuthResponse(
        client_version=CLIENT_VERSION,
        response=pb.AuthData(auth_method_name=auth_method, auth_data=auth_data),
        protocol_version=PROTOCOL_VERSION,
    )


def ping() -> bytes:
    return encode_command(T(type=T.PING, ping=pb.CommandPing()))


def pong() -> bytes:
    return encode_command(T(type=T.PONG, pong=pb.CommandPong()))


# -- lookups and metadata ----------------------------------------------------


def lookup(
    topic: str, request_id: int, *, authoritative: bool, listener_name: str
) -> pb.CommandLookupTopic:
    return pb.CommandLookupTopic(
        topic=topic,
        request_id=request_id,
        authoritative=authoritative,
        advertised_listener_name=listener_name,
    )


def partitioned_metadata(topic: str, request_id: int) -> pb.CommandPartitionedTopicMetadata:
    return pb.CommandPartitionedTopicMetadata(topic=topic, request_id=request_id)


def get_topics_of_namespace(
    namespace: str, mode: int, request_id: int
) -> pb.CommandGetTopicsOfNamespace:
    return pb.CommandGetTopicsOfNamespace(
        request_id=request_id,
        namespace=namespace,
        mode=mode,  # type: ignore[arg-type]
    )


def get_schema(topic: str, request_id: int, version: int | None = None) -> pb.CommandGetSchema:
    command = pb.CommandGetSchema(request_id=request_id, topic=topic)
    if version is not None:
        command.schema_version = version.to_bytes(8, "big")
    return command


def watch_topic_list(
    request_id: int, watcher_id: int, namespace: str, pattern: str, topics_hash: str | None
) -> pb.CommandWatchTopicList:
    return pb.CommandWatchTopicList(
        request_id=request_id,
        watcher_id=watcher_id,
        namespace=namespace,
        topics_pattern=pattern,
        topics_hash=topics_hash,
    )


def watch_topic_list_close(request_id: int, watcher_id: int) -> pb.CommandWatchTopicListClose:
    return pb.CommandWatchTopicListClose(request_id=request_id, watcher_id=watcher_id)


# -- producers -----------------------------------------------------------------


def producer(
    topic: str,
    producer_id: int,
    request_id: int,
    *,
    epoch: int,
    producer_name: str,
    user_provided_producer_name: bool,
    access_mode: int,
    schema: pb.Schema | None,
    properties: Mapping[str, str],
) -> pb.CommandProducer:
    command = pb.CommandProducer(
        topic=topic,
        producer_id=producer_id,
        request_id=request_id,
        epoch=epoch,
        user_provided_producer_name=user_provided_producer_name,
        producer_access_mode=access_mode,  # type: ignore[arg-type]
    )
    if producer_name:
        command.producer_name = producer_name
    if schema is not None:
        command.schema.CopyFrom(schema)
    if properties:
        command.metadata.extend(_key_values(properties))
    return command


def close_producer(producer_id: int, request_id: int) -> pb.CommandCloseProducer:
    return pb.CommandCloseProducer(producer_id=producer_id, request_id=request_id)


def send(
    producer_id: int,
    sequence_id: int,
    highest_sequence_id: int,
    num_messages: int,
    metadata: pb.MessageMetadata,
    payload: bytes,
    *,
    is_chunk: bool = False,
) -> bytes:
    """The SEND frame of one message, batch or chunk (once per send: bytes directly)."""
    command = pb.CommandSend(
        producer_id=producer_id, sequence_id=sequence_id, num_messages=num_messages
    )
    if highest_sequence_id != sequence_id:
        command.highest_sequence_id = highest_sequence_id
    if is_chunk:
        command.is_chunk = True
    return encode_payload_command(T(type=T.SEND, send=command), Payload.build(metadata, payload))


# -- consumers -----------------------------------------------------------------


def subscribe(
    topic: str,
    subscription: str,
    consumer_id: int,
    request_id: int,
    *,
    sub_type: int,
    consumer_name: str,
    durable: bool,
    initial_position: int,
    priority_level: int,
    read_compacted: bool,
    replicate_subscription_state: bool,
    start_message_id: MessageId | None,
    properties: Mapping[str, str],
    key_shared_meta: pb.KeySharedMeta | None,
    schema: pb.Schema | None,
) -> pb.CommandSubscribe:
    command = pb.CommandSubscribe(
        topic=topic,
        subscription=subscription,
        subType=sub_type,  # type: ignore[arg-type]
        consumer_id=consumer_id,
        request_id=request_id,
        consumer_name=consumer_name,
        durable=durable,
        initialPosition=initial_position,  # type: ignore[arg-type]
        priority_level=priority_level,
        read_compacted=read_compacted,
        replicate_subscription_state=replicate_subscription_state,
    )
    if start_message_id is not None:
        start_message_id.to_proto(command.start_message_id)
    if properties:
        command.metadata.extend(_key_values(properties))
    if key_shared_meta is not None:
        command.keySharedMeta.CopyFrom(key_shared_meta)
    if schema is not None:
        command.schema.CopyFrom(schema)
    return command


def flow(consumer_id: int, permits: int) -> pb.CommandFlow:
    return pb.CommandFlow(consumer_id=consumer_id, messagePermits=permits)


def individual_ack(
    consumer_id: int,
    entries: Iterable[tuple[int, int]],
    batch_acks: Iterable[tuple[int, int, int, list[int]]] = (),
) -> pb.CommandAck:
    """Acks of whole entries (ledger, entry), then of batch indexes
    (ledger, entry, batch size, ack_set words: bits set = still unacked)."""
    command = pb.CommandAck(consumer_id=consumer_id, ack_type=_ACK.Individual)
    for ledger, entry in entries:
        command.message_id.add(ledgerId=to_unsigned64(ledger), entryId=to_unsigned64(entry))
    for ledger, entry, size, ack_set in batch_acks:
        data = command.message_id.add(
            ledgerId=to_unsigned64(ledger), entryId=to_unsigned64(entry), batch_size=size
        )
        data.ack_set.extend(ack_set)
    return command


def cumulative_ack(
    consumer_id: int, ledger: int, entry: int, batch_size: int = 0, ack_set: list[int] | None = None
) -> pb.CommandAck:
    """Everything up to (ledger, entry); with `ack_set`, the batch indexes
    still unacked in that entry."""
    command = pb.CommandAck(consumer_id=consumer_id, ack_type=_ACK.Cumulative)
    data = command.message_id.add(ledgerId=to_unsigned64(ledger), entryId=to_unsigned64(entry))
    if ack_set is not None:
        data.batch_size = batch_size
        data.ack_set.extend(ack_set)
    return command


def validation_ack(consumer_id: int, ledger: int, entry: int, error: int) -> pb.CommandAck:
    """An entry this consumer cannot read (checksum, decompression)."""
    command = pb.CommandAck(consumer_id=consumer_id, ack_type=_ACK.Individual)
    command.message_id.add(ledgerId=ledger, entryId=entry)
    command.validation_error = error  # type: ignore[assignment]
    return command


def redeliver_unacknowledged(
    consumer_id: int, entries: Iterable[tuple[int, int]] = ()
) -> pb.CommandRedeliverUnacknowledgedMessages:
    """Redeliver the named entries, or everything unacked without any."""
    command = pb.CommandRedeliverUnacknowledgedMessages(consumer_id=consumer_id)
    for ledger, entry in entries:
        command.message_ids.add(ledgerId=to_unsigned64(ledger), entryId=to_unsigned64(entry))
    return command


def seek(consumer_id: int, request_id: int, target: MessageId | int) -> pb.CommandSeek:
    """Seek to a message id (of the topic or partition seeking) or a publish time in ms."""
    command = pb.CommandSeek(consumer_id=consumer_id, request_id=request_id)
    if isinstance(target, MessageId):
        target.to_proto(command.message_id)
        command.message_id.ClearField("partition")
    else:
        command.message_publish_time = int(target)
    return command


def get_last_message_id(consumer_id: int, request_id: int) -> pb.CommandGetLastMessageId:
    return pb.CommandGetLastMessageId(consumer_id=consumer_id, request_id=request_id)


def unsubscribe(consumer_id: int, request_id: int) -> pb.CommandUnsubscribe:
    return pb.CommandUnsubscribe(consumer_id=consumer_id, request_id=request_id)


def close_consumer(consumer_id: int, request_id: int) -> pb.CommandCloseConsumer:
    return pb.CommandCloseConsumer(consumer_id=consumer_id, request_id=request_id)
