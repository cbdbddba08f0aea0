"""Consumer-side commands of one connection: SUBSCRIBE, FLOW, ACK, REDELIVER,
CLOSE_CONSUMER, UNSUBSCRIBE, GET_LAST_MESSAGE_ID, SEEK, CONSUMER_STATS.

ServerCnx owns one ConsumerCommands and routes these frames to it; the
consumers opened on the connection live here.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from magnetar.broker import commands
from magnetar.broker.consumer import Consumer
from magnetar.broker.errors import BrokerServiceError, ConsumerBusyError
from magnetar.broker.service import parse_topic
from magnetar.broker.storage.api import (
    EARLIEST,
    LATEST,
    Entry,
    InitialPosition,
    Position,
    StorageError,
)
from magnetar.broker.subscription import sub_type_name
from magnetar.broker.topics.persistent import PersistentTopic
from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.errors import ServerError
from magnetar.proto.frames import Frame, Payload
from magnetar.proto.ids import INT64_MAX, to_signed64

if TYPE_CHECKING:
    from magnetar.broker.cnx import ServerCnx

_Earliest = pb.CommandSubscribe.Earliest
_Cumulative = pb.CommandAck.Cumulative


def wire_position(mid: pb.MessageIdData) -> Position:
    return Position(to_signed64(mid.ledgerId), to_signed64(mid.entryId))


class ConsumerCommands:
    def __init__(self, cnx: ServerCnx) -> None:
        self.cnx = cnx
        self.consumers: dict[int, tuple[Consumer, PersistentTopic]] = {}

    def handle_subscribe(self, frame: Frame) -> None:
        cmd = frame.command.subscribe
        self.cnx.spawn(self._subscribe(cmd), cmd.request_id, "SUBSCRIBE")

    async def _subscribe(self, cmd: pb.CommandSubscribe) -> None:
        cid = cmd.consumer_id
        if cid in self.consumers:
            consumer, topic = self.consumers[cid]
            if topic.name == str(parse_topic(cmd.topic)) and (
                consumer.subscription.name == cmd.subscription
            ):
                self.cnx.write(commands.success(cmd.request_id))
                return
            raise ConsumerBusyError(f"consumer id {cid} is already in use on this connection")
        topic = await self.cnx.service.get_topic(cmd.topic, create=cmd.force_topic_creation)
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
        consumer = await topic.subscribe(
            self.cnx,
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
        )
        if self.cnx.is_closed:
            topic.remove_consumer(consumer)
            return
        self.consumers[cid] = (consumer, topic)
        self.cnx.log.info(
            "consumer subscribed",
            topic=topic.name,
            subscription=cmd.subscription,
            type=sub_type_name(cmd.subType),
            consumer=consumer.name,
            consumer_id=cid,
        )
        self.cnx.write(commands.success(cmd.request_id))

    def handle_flow(self, frame: Frame) -> None:
        flow = frame.command.flow
        entry = self.consumers.get(flow.consumer_id)
        if entry is None:
            return  # closed meanwhile; Pulsar ignores these too
        consumer = entry[0]
        dispatcher = consumer.subscription.dispatcher
        if dispatcher is not None:
            dispatcher.consumer_flow(consumer, flow.messagePermits)

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
        consumer = entry[0]
        subscription = consumer.subscription
        try:
            if ack.ack_type == _Cumulative:
                if len(ack.message_id) != 1:
                    raise BrokerServiceError(
                        ServerError.NotAllowedError, "a cumulative ACK carries exactly one id"
                    )
                mid = ack.message_id[0]
                position = wire_position(mid)
                if mid.ack_set:
                    # Part of this batch is still unacked: ack up to the entry before.
                    subscription.cursor.delete_batch_indexes(position, list(mid.ack_set))
                    position = subscription.ledger.previous_position(position)
                subscription.acknowledge_cumulative(consumer, position)
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
        consumer = entry[0]
        if cmd.HasField("consumer_epoch"):
            consumer.epoch = cmd.consumer_epoch
        positions = [wire_position(m) for m in cmd.message_ids] if cmd.message_ids else None
        consumer.subscription.redeliver(consumer, positions)

    def handle_close_consumer(self, frame: Frame) -> None:
        cmd = frame.command.close_consumer
        entry = self.consumers.pop(cmd.consumer_id, None)
        if entry is not None:
            consumer, topic = entry
            topic.remove_consumer(consumer)
            self.cnx.log.info(
                "consumer closed",
                topic=topic.name,
                subscription=consumer.subscription.name,
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
        consumer, topic = entry
        await topic.unsubscribe(consumer)
        self.consumers.pop(consumer_id, None)
        self.cnx.log.info("unsubscribed", topic=topic.name, subscription=consumer.subscription.name)
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
        consumer, topic = entry
        last, batch_index = await topic.last_message_id()
        mark_delete = consumer.subscription.cursor.mark_delete_position
        self.cnx.write(
            commands.last_message_id(
                request_id, last, batch_index, mark_delete, topic.partition_index
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
        consumer, topic = entry
        subscription = consumer.subscription
        cursor = subscription.cursor
        ledger = topic.ledger
        if cmd.HasField("message_id"):
            target = wire_position(cmd.message_id)
            if target.ledger_id < 0:
                target = EARLIEST
        elif cmd.HasField("message_publish_time"):
            when = cmd.message_publish_time

            def published_before(e: Entry) -> bool:
                return bool(
                    Payload.parse(e.data, verify_checksum=False).metadata.publish_time < when
                )

            newest = await cursor.find_newest_matching(published_before, from_first_entry=True)
            target = ledger.first_position if newest is None else ledger.next_position(newest)
        else:
            raise BrokerServiceError(
                ServerError.NotAllowedError, "SEEK needs a message id or a publish time"
            )
        # WIRE 12: close the subscription's consumers (they resubscribe), then
        # move the cursor, then answer.
        for other in list(subscription.consumers):
            topic.remove_consumer(other)
            other.cnx.consumer_closed_by_broker(other.consumer_id)
        await cursor.reset_cursor(target)
        self.cnx.log.info("subscription reset", topic=topic.name, subscription=subscription.name)
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
        consumer = entry[0]
        self.cnx.write(
            commands.consumer_stats(
                cmd.request_id,
                name=consumer.name,
                permits=consumer.permits,
                unacked=consumer.unacked_messages,
                backlog=consumer.subscription.cursor.backlog_messages,
                type_name=sub_type_name(consumer.sub_type),
            )
        )
