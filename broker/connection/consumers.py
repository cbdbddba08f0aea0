"""Consumer-side commands of one connection: SUBSCRIBE, FLOW, ACK, REDELIVER,
CLOSE_CONSUMER, UNSUBSCRIBE, GET_LAST_MESSAGE_ID, SEEK, CONSUMER_STATS.

ServerCnx owns one ConsumerCommands and routes these frames to it; the
consumers opened on the connection live here.
"""

from __future__ import annotations

import uuid
from typing import NamedTuple

from magnetar.broker import commands
from magnetar.broker.connection.context import CommandContext
from magnetar.broker.connection.limits import check_subscribe
from magnetar.broker.dispatchers.consumer import Consumer, KeySharedPolicy, SubType, sub_type_name
from magnetar.broker.errors import BrokerServiceError, ConsumerBusyError
from magnetar.broker.policies.subscribe_rate import SubscribeRateLimiter, consumer_identity
from magnetar.broker.schemas.types import from_wire
from magnetar.broker.service.broker_service import check_name, parse_topic
from magnetar.broker.storage.api import (
    EARLIEST,
    LATEST,
    InitialPosition,
    Position,
    StorageError,
)
from magnetar.broker.topics.base import SubscribeOptions, Subscription, Topic
from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.errors import ServerError
from magnetar.proto.frames import Frame
from magnetar.proto.ids import INT64_MAX, to_signed64
from magnetar.proto.naming import validate_consumer_name, validate_subscription_name

_Earliest = pb.CommandSubscribe.Earliest
_Cumulative = pb.CommandAck.Cumulative


def wire_position(mid: pb.MessageIdData) -> Position:
    return Position(to_signed64(mid.ledgerId), to_signed64(mid.entryId))


class AttachedConsumer(NamedTuple):
    consumer: Consumer
    subscription: Subscription
    topic: Topic


class ConsumerCommands:
    def __init__(self, cnx: CommandContext) -> None:
        self.cnx = cnx
        self.consumers: dict[int, AttachedConsumer] = {}

    def handle_subscribe(self, frame: Frame) -> None:
        cmd = frame.command.subscribe
        self.cnx.spawn(self._subscribe(cmd), cmd.request_id, "SUBSCRIBE")

    async def _subscribe(self, cmd: pb.CommandSubscribe) -> None:
        cid = cmd.consumer_id
        if cid in self.consumers:
            attached = self.consumers[cid]
            if attached.topic.name == str(parse_topic(cmd.topic)) and (
                attached.subscription.name == cmd.subscription
            ):
                self.cnx.write(commands.success(cmd.request_id))
                return
            raise ConsumerBusyError(f"consumer id {cid} is already in use on this connection")
        check_name(validate_subscription_name, cmd.subscription)
        check_name(validate_consumer_name, cmd.consumer_name)
        await self.cnx.authorize("consume", cmd.topic)
        topic = await self.cnx.service.get_topic(cmd.topic, create=cmd.force_topic_creation)
        schema = from_wire(cmd.schema) if cmd.HasField("schema") else None
        if schema is not None:
            await self.cnx.service.schemas.check_consumer(topic.topic_name, schema)
        start: Position | None = None
        if cmd.HasField("start_message_id"):
            start = wire_position(cmd.start_message_id)
            if start.ledger_id < 0:
                start = EARLIEST
            elif start.ledger_id == INT64_MAX:
                start = LATEST
        initial = (
            InitialPosition.EARLIEST if cmd.initialPosition == _Earliest else InitialPosition.LATEST
        )
        key_shared = None
        if cmd.subType == SubType.Key_Shared:
            # Absent meta means AUTO_SPLIT, in order (the Java client's default).
            key_shared = KeySharedPolicy.from_wire(
                cmd.keySharedMeta if cmd.HasField("keySharedMeta") else None
            )
        options = SubscribeOptions(
            consumer_id=cid,
            subscription=cmd.subscription,
            sub_type=cmd.subType,
            consumer_name=cmd.consumer_name or uuid.uuid4().hex[:10],
            priority_level=cmd.priority_level,
            initial_position=initial,
            durable=cmd.durable,
            start_position=start,
            # WIRE 11: delivery starts at the id itself; the client drops what
            # it must (the id unless inclusive, earlier messages of a batch).
            start_inclusive=True,
            epoch=cmd.consumer_epoch if cmd.HasField("consumer_epoch") else None,
            key_shared=key_shared,
            read_compacted=cmd.read_compacted,
            replicate_subscription_state=cmd.replicate_subscription_state,
        )
        policies = await self.cnx.service.policies.resolve(topic.topic_name)
        check_subscribe(topic, cmd.subscription, cmd.subType, policies)
        rate = topic.subscribe_rate
        if rate is not None:
            self._check_subscribe_rate(rate, options)
        consumer, subscription = await topic.subscribe(self.cnx, options)
        if self.cnx.is_closed:
            subscription.remove_consumer(consumer)
            return
        self.consumers[cid] = AttachedConsumer(consumer, subscription, topic)
        self.cnx.log.info(
            "consumer subscribed",
            topic=topic.name,
            subscription=cmd.subscription,
            type=sub_type_name(cmd.subType),
            consumer=consumer.name,
            consumer_id=cid,
        )
        self.cnx.write(commands.success(cmd.request_id))

    def _check_subscribe_rate(
        self, limiter: SubscribeRateLimiter, options: SubscribeOptions
    ) -> None:
        """subscribeRate: once this consumer has subscribed its quota of times
        in the period, NotAllowed with Pulsar's message (a code the client
        fails fast on, WIRE 2, instead of retrying at once); spawn() logs it."""
        identity = consumer_identity(self.cnx.address, options.consumer_name, options.consumer_id)
        if limiter.try_acquire(identity):
            return
        raise BrokerServiceError(
            ServerError.NotAllowedError, "Subscribe limited by subscribe rate limit per consumer."
        )

    def handle_flow(self, frame: Frame) -> None:
        flow = frame.command.flow
        entry = self.consumers.get(flow.consumer_id)
        if entry is None:
            return  # closed meanwhile; Pulsar ignores these too
        entry.subscription.consumer_flow(entry.consumer, flow.messagePermits)

    def handle_ack(self, frame: Frame) -> None:
        ack = frame.command.ack
        entry = self.consumers.get(ack.consumer_id)
        has_request = ack.HasField("request_id")
        if entry is None:
            if has_request:
                self.cnx.write(
                    commands.ack_response(
                        ack.consumer_id,
                        ack.request_id,
                        ServerError.ConsumerNotFound,
                        f"consumer {ack.consumer_id} is not open",
                    )
                )
            return
        consumer, subscription = entry.consumer, entry.subscription
        try:
            if ack.ack_type == _Cumulative:
                if len(ack.message_id) != 1:
                    raise BrokerServiceError(
                        ServerError.NotAllowedError, "a cumulative ACK carries exactly one id"
                    )
                mid = ack.message_id[0]
                subscription.acknowledge_cumulative(
                    consumer, wire_position(mid), list(mid.ack_set) if mid.ack_set else None
                )
            else:
                positions = [wire_position(m) for m in ack.message_id]
                ack_sets = [list(m.ack_set) if m.ack_set else None for m in ack.message_id]
                subscription.acknowledge_individual(consumer, positions, ack_sets)
        except BrokerServiceError as exc:
            self.cnx.log.info("ack refused", consumer_id=ack.consumer_id, detail=exc.message)
            if has_request:
                self.cnx.write(
                    commands.ack_response(ack.consumer_id, ack.request_id, exc.code, exc.message)
                )
            return
        except StorageError as exc:
            self.cnx.log.warning("ack failed", consumer_id=ack.consumer_id, detail=str(exc))
            if has_request:
                self.cnx.write(
                    commands.ack_response(
                        ack.consumer_id, ack.request_id, ServerError.PersistenceError, str(exc)
                    )
                )
            return
        if has_request:
            self.cnx.write(commands.ack_response(ack.consumer_id, ack.request_id, None, ""))

    def handle_redeliver(self, frame: Frame) -> None:
        cmd = frame.command.redeliverUnacknowledgedMessages
        entry = self.consumers.get(cmd.consumer_id)
        if entry is None:
            return
        consumer = entry.consumer
        if cmd.HasField("consumer_epoch"):
            consumer.epoch = cmd.consumer_epoch
        positions = [wire_position(m) for m in cmd.message_ids] if cmd.message_ids else None
        entry.subscription.redeliver(consumer, positions)

    def handle_close_consumer(self, frame: Frame) -> None:
        cmd = frame.command.close_consumer
        entry = self.consumers.pop(cmd.consumer_id, None)
        if entry is not None:
            entry.subscription.remove_consumer(entry.consumer)
            self.cnx.log.info(
                "consumer closed",
                topic=entry.topic.name,
                subscription=entry.subscription.name,
                consumer_id=cmd.consumer_id,
            )
        # An unknown id is no error (WIRE 20).
        self.cnx.write(commands.success(cmd.request_id))

    def handle_unsubscribe(self, frame: Frame) -> None:
        cmd = frame.command.unsubscribe
        self.cnx.spawn(
            self._unsubscribe(cmd.consumer_id, cmd.request_id), cmd.request_id, "UNSUBSCRIBE"
        )

    async def _unsubscribe(self, consumer_id: int, request_id: int) -> None:
        entry = self.consumers.get(consumer_id)
        if entry is None:
            raise BrokerServiceError(
                ServerError.ConsumerNotFound, f"consumer {consumer_id} is not open"
            )
        await entry.topic.unsubscribe(entry.subscription, entry.consumer)
        self.consumers.pop(consumer_id, None)
        self.cnx.log.info(
            "unsubscribed", topic=entry.topic.name, subscription=entry.subscription.name
        )
        self.cnx.write(commands.success(request_id))

    def handle_get_last_message_id(self, frame: Frame) -> None:
        cmd = frame.command.getLastMessageId
        self.cnx.spawn(
            self._get_last_message_id(cmd.consumer_id, cmd.request_id),
            cmd.request_id,
            "GET_LAST_MESSAGE_ID",
        )

    async def _get_last_message_id(self, consumer_id: int, request_id: int) -> None:
        entry = self.consumers.get(consumer_id)
        if entry is None:
            raise BrokerServiceError(
                ServerError.ConsumerNotFound, f"consumer {consumer_id} is not open"
            )
        last = await entry.subscription.last_message_id()
        self.cnx.write(
            commands.last_message_id(
                request_id,
                last.position,
                last.batch_index,
                last.mark_delete,
                entry.topic.partition_index,
            )
        )

    def handle_seek(self, frame: Frame) -> None:
        cmd = frame.command.seek
        self.cnx.spawn(self._seek(cmd), cmd.request_id, "SEEK")

    async def _seek(self, cmd: pb.CommandSeek) -> None:
        entry = self.consumers.get(cmd.consumer_id)
        if entry is None:
            raise BrokerServiceError(
                ServerError.ConsumerNotFound, f"consumer {cmd.consumer_id} is not open"
            )
        subscription = entry.subscription
        if cmd.HasField("message_id"):
            await subscription.reset_cursor(wire_position(cmd.message_id))
        elif cmd.HasField("message_publish_time"):
            await subscription.reset_cursor_to_time(cmd.message_publish_time)
        else:
            raise BrokerServiceError(
                ServerError.NotAllowedError, "SEEK needs a message id or a publish time"
            )
        self.cnx.write(commands.success(cmd.request_id))

    def handle_consumer_stats(self, frame: Frame) -> None:
        cmd = frame.command.consumerStats
        entry = self.consumers.get(cmd.consumer_id)
        if entry is None:
            self.cnx.write(
                commands.error(
                    cmd.request_id,
                    ServerError.ConsumerNotFound,
                    f"consumer {cmd.consumer_id} is not open",
                )
            )
            return
        consumer = entry.consumer
        self.cnx.write(
            commands.consumer_stats(
                cmd.request_id,
                name=consumer.name,
                permits=consumer.permits,
                unacked=consumer.unacked_messages,
                backlog=entry.subscription.stats().msg_backlog,
                type_name=sub_type_name(consumer.sub_type),
            )
        )

    def closed_by_broker(self, consumer_id: int) -> None:
        """The topic closed this consumer; forget it."""
        self.consumers.pop(consumer_id, None)

    def consumers_writable(self) -> None:
        """The socket drained: let this connection's subscriptions dispatch."""
        for entry in list(self.consumers.values()):
            entry.subscription.consumers_writable()

    def detach_all(self) -> None:
        """The connection is gone: every consumer leaves its subscription."""
        for entry in list(self.consumers.values()):
            entry.subscription.remove_consumer(entry.consumer)
        self.consumers.clear()
