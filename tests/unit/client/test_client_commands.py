"""The client's command builders give, field by field and byte for byte, the
commands the client sent before they were gathered in one module."""

from __future__ import annotations

from google.protobuf.message import Message

from magnetar.client.aio.net import commands
from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.frames import FrameDecoder, Payload, encode_command, encode_payload_command
from magnetar.proto.ids import MessageId

T = pb.BaseCommand
_U64 = 1 << 64


def _same(built: Message, expected: Message) -> None:
    assert type(built) is type(expected)
    assert built.ListFields() == expected.ListFields()
    assert built.SerializeToString() == expected.SerializeToString()


def test_encode_frames_the_body_in_its_base_command() -> None:
    body = pb.CommandFlow(consumer_id=3, messagePermits=1000)
    expected = encode_command(T(type=T.FLOW, flow=body))
    assert commands.encode(body) == expected
    decoder = FrameDecoder()
    decoder.feed(expected)
    frame = decoder.next_frame()
    assert frame is not None and frame.command.flow == body


def test_ping_and_pong_are_empty_bodies_present_on_the_wire() -> None:
    assert commands.ping() == encode_command(T(type=T.PING, ping=pb.CommandPing()))
    assert commands.pong() == encode_command(T(type=T.PONG, pong=pb.CommandPong()))
    decoder = FrameDecoder()
    decoder.feed(commands.ping() + commands.pong())
    ping, pong = decoder.next_frame(), decoder.next_frame()
    assert ping is not None and ping.command.HasField("ping")
    assert pong is not None and pong.command.HasField("pong")


def test_connect_without_and_with_authentication() -> None:
    expected = pb.CommandConnect(
        client_version=commands.CLIENT_VERSION, protocol_version=commands.PROTOCOL_VERSION
    )
    expected.feature_flags.supports_auth_refresh = True
    _same(commands.connect(), expected)
    _same(commands.connect("", b"ignored"), expected)
    expected.auth_method_name = "token"
    expected.auth_data = b"secret"
    _same(commands.connect("token", b"secret"), expected)


def test_auth_response() -> None:
    _same(
        commands.auth_response("token", b"fresh"),
        pb.CommandAuthResponse(
            client_version=commands.CLIENT_VERSION,
            response=pb.AuthData(auth_method_name="token", auth_data=b"fresh"),
            protocol_version=commands.PROTOCOL_VERSION,
        ),
    )


def test_lookup_partitioned_metadata_and_topics_of_namespace() -> None:
    topic = "persistent://t/n/a"
    _same(
        commands.lookup(topic, 7, authoritative=True, listener_name="internal"),
        pb.CommandLookupTopic(
            topic=topic, request_id=7, authoritative=True, advertised_listener_name="internal"
        ),
    )
    _same(
        commands.lookup(topic, 8, authoritative=False, listener_name=""),
        pb.CommandLookupTopic(
            topic=topic, request_id=8, authoritative=False, advertised_listener_name=""
        ),
    )
    _same(
        commands.partitioned_metadata(topic, 9),
        pb.CommandPartitionedTopicMetadata(topic=topic, request_id=9),
    )
    _same(
        commands.get_topics_of_namespace("t/n", pb.CommandGetTopicsOfNamespace.ALL, 10),
        pb.CommandGetTopicsOfNamespace(
            request_id=10, namespace="t/n", mode=pb.CommandGetTopicsOfNamespace.ALL
        ),
    )


def test_get_schema_latest_and_at_a_version() -> None:
    topic = "persistent://t/n/s"
    _same(commands.get_schema(topic, 4), pb.CommandGetSchema(request_id=4, topic=topic))
    _same(
        commands.get_schema(topic, 5, 2),
        pb.CommandGetSchema(request_id=5, topic=topic, schema_version=(2).to_bytes(8, "big")),
    )


def test_watch_topic_list_and_its_close() -> None:
    _same(
        commands.watch_topic_list(1, 2, "t/n", "persistent://t/n/a.*", None),
        pb.CommandWatchTopicList(
            request_id=1, watcher_id=2, namespace="t/n", topics_pattern="persistent://t/n/a.*"
        ),
    )
    _same(
        commands.watch_topic_list(1, 2, "t/n", "p", "abc"),
        pb.CommandWatchTopicList(
            request_id=1, watcher_id=2, namespace="t/n", topics_pattern="p", topics_hash="abc"
        ),
    )
    _same(
        commands.watch_topic_list_close(3, 2),
        pb.CommandWatchTopicListClose(request_id=3, watcher_id=2),
    )


def test_producer_with_and_without_its_optional_fields() -> None:
    topic = "persistent://t/n/p"
    plain = commands.producer(
        topic,
        1,
        2,
        epoch=0,
        producer_name="",
        user_provided_producer_name=False,
        access_mode=pb.Shared,
        schema=None,
        properties={},
    )
    _same(
        plain,
        pb.CommandProducer(
            topic=topic,
            producer_id=1,
            request_id=2,
            epoch=0,
            user_provided_producer_name=False,
            producer_access_mode=pb.Shared,
        ),
    )
    schema = pb.Schema(name="s", schema_data=b"{}", type=pb.Schema.Json)
    full = commands.producer(
        topic,
        1,
        3,
        epoch=2,
        producer_name="named",
        user_provided_producer_name=True,
        access_mode=pb.WaitForExclusive,
        schema=schema,
        properties={"b": "2", "a": "1"},
    )
    expected = pb.CommandProducer(
        topic=topic,
        producer_id=1,
        request_id=3,
        epoch=2,
        user_provided_producer_name=True,
        producer_access_mode=pb.WaitForExclusive,
        producer_name="named",
        schema=schema,
        metadata=[pb.KeyValue(key="a", value="1"), pb.KeyValue(key="b", value="2")],
    )
    _same(full, expected)


def test_close_producer_and_close_consumer() -> None:
    _same(commands.close_producer(1, 2), pb.CommandCloseProducer(producer_id=1, request_id=2))
    _same(commands.close_consumer(3, 4), pb.CommandCloseConsumer(consumer_id=3, request_id=4))


def _send_frame(send: pb.CommandSend, meta: pb.MessageMetadata, payload: bytes) -> bytes:
    return encode_payload_command(T(type=T.SEND, send=send), Payload.build(meta, payload))


def test_send_frames_a_message_a_batch_and_a_chunk() -> None:
    meta = pb.MessageMetadata(producer_name="p", sequence_id=5, publish_time=1)
    assert commands.send(1, 5, 5, 1, meta, b"body") == _send_frame(
        pb.CommandSend(producer_id=1, sequence_id=5, num_messages=1), meta, b"body"
    )
    assert commands.send(1, 5, 9, 5, meta, b"batch") == _send_frame(
        pb.CommandSend(producer_id=1, sequence_id=5, num_messages=5, highest_sequence_id=9),
        meta,
        b"batch",
    )
    chunk = commands.send(1, 5, 5, 1, meta, b"part", is_chunk=True)
    assert chunk == _send_frame(
        pb.CommandSend(producer_id=1, sequence_id=5, num_messages=1, is_chunk=True),
        meta,
        b"part",
    )
    decoder = FrameDecoder()
    decoder.feed(chunk)
    frame = decoder.next_frame()
    assert frame is not None and frame.payload is not None
    assert frame.command.send.is_chunk and not frame.command.send.HasField("highest_sequence_id")
    assert frame.payload.metadata == meta


def test_subscribe_with_and_without_its_optional_fields() -> None:
    topic = "persistent://t/n/c"
    plain = commands.subscribe(
        topic,
        "sub",
        1,
        2,
        sub_type=pb.CommandSubscribe.Exclusive,
        initial_position=pb.CommandSubscribe.Latest,
        start_message_id=None,
        properties={},
        key_shared_meta=None,
        schema=None,
        consumer_name="c",
        durable=True,
        priority_level=0,
        read_compacted=False,
        replicate_subscription_state=False,
    )
    expected = pb.CommandSubscribe(
        topic=topic,
        subscription="sub",
        subType=pb.CommandSubscribe.Exclusive,
        consumer_id=1,
        request_id=2,
        initialPosition=pb.CommandSubscribe.Latest,
        consumer_name="c",
        durable=True,
        priority_level=0,
        read_compacted=False,
        replicate_subscription_state=False,
    )
    _same(plain, expected)
    key_shared = pb.KeySharedMeta(
        keySharedMode=pb.KeySharedMeta.STICKY, allowOutOfOrderDelivery=True
    )
    schema = pb.Schema(name="s", schema_data=b"", type=pb.Schema.String)
    full = commands.subscribe(
        topic,
        "sub",
        1,
        3,
        sub_type=pb.CommandSubscribe.Key_Shared,
        initial_position=pb.CommandSubscribe.Earliest,
        start_message_id=MessageId(4, 5, 1, 2),
        properties={"z": "26", "a": "1"},
        key_shared_meta=key_shared,
        schema=schema,
        consumer_name="c",
        durable=False,
        priority_level=2,
        read_compacted=True,
        replicate_subscription_state=True,
    )
    expected = pb.CommandSubscribe(
        topic=topic,
        subscription="sub",
        subType=pb.CommandSubscribe.Key_Shared,
        consumer_id=1,
        request_id=3,
        initialPosition=pb.CommandSubscribe.Earliest,
        start_message_id=pb.MessageIdData(ledgerId=4, entryId=5, partition=1, batch_index=2),
        metadata=[pb.KeyValue(key="a", value="1"), pb.KeyValue(key="z", value="26")],
        keySharedMeta=key_shared,
        schema=schema,
        consumer_name="c",
        durable=False,
        priority_level=2,
        read_compacted=True,
        replicate_subscription_state=True,
    )
    _same(full, expected)


def test_flow() -> None:
    _same(commands.flow(3, 500), pb.CommandFlow(consumer_id=3, messagePermits=500))


def test_individual_ack_of_entries_and_batch_indexes() -> None:
    built = commands.individual_ack(3, [(1, 2), (-1, -1)], [(4, 5, 10, [0b110])])
    expected = pb.CommandAck(consumer_id=3, ack_type=pb.CommandAck.Individual)
    expected.message_id.add(ledgerId=1, entryId=2)
    expected.message_id.add(ledgerId=_U64 - 1, entryId=_U64 - 1)
    expected.message_id.add(ledgerId=4, entryId=5, batch_size=10, ack_set=[0b110])
    _same(built, expected)


def test_cumulative_ack_with_and_without_an_ack_set() -> None:
    expected = pb.CommandAck(consumer_id=3, ack_type=pb.CommandAck.Cumulative)
    expected.message_id.add(ledgerId=1, entryId=2)
    _same(commands.cumulative_ack(3, 1, 2), expected)
    expected.message_id[0].batch_size = 8
    expected.message_id[0].ack_set.append(0b11110000)
    _same(commands.cumulative_ack(3, 1, 2, 8, [0b11110000]), expected)


def test_validation_ack() -> None:
    expected = pb.CommandAck(
        consumer_id=3,
        ack_type=pb.CommandAck.Individual,
        validation_error=pb.CommandAck.ChecksumMismatch,
    )
    expected.message_id.add(ledgerId=1, entryId=2)
    _same(commands.validation_ack(3, 1, 2, pb.CommandAck.ChecksumMismatch), expected)


def test_redeliver_all_or_named_entries() -> None:
    _same(
        commands.redeliver_unacknowledged(3),
        pb.CommandRedeliverUnacknowledgedMessages(consumer_id=3),
    )
    expected = pb.CommandRedeliverUnacknowledgedMessages(consumer_id=3)
    expected.message_ids.add(ledgerId=1, entryId=2)
    expected.message_ids.add(ledgerId=_U64 - 1, entryId=0)
    _same(commands.redeliver_unacknowledged(3, [(1, 2), (-1, 0)]), expected)


def test_seek_to_a_message_id_drops_its_partition() -> None:
    _same(
        commands.seek(3, 4, MessageId(5, 6, 2, 1)),
        pb.CommandSeek(
            consumer_id=3,
            request_id=4,
            message_id=pb.MessageIdData(ledgerId=5, entryId=6, batch_index=1),
        ),
    )
    _same(
        commands.seek(3, 4, MessageId.earliest),
        pb.CommandSeek(
            consumer_id=3,
            request_id=4,
            message_id=pb.MessageIdData(ledgerId=_U64 - 1, entryId=_U64 - 1),
        ),
    )


def test_seek_to_a_publish_time() -> None:
    _same(
        commands.seek(3, 4, 1_700_000_000_000),
        pb.CommandSeek(consumer_id=3, request_id=4, message_publish_time=1_700_000_000_000),
    )


def test_get_last_message_id_and_unsubscribe() -> None:
    _same(
        commands.get_last_message_id(3, 4),
        pb.CommandGetLastMessageId(consumer_id=3, request_id=4),
    )
    _same(commands.unsubscribe(3, 5), pb.CommandUnsubscribe(consumer_id=3, request_id=5))
