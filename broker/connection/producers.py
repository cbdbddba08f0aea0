"""Producer-side commands of one connection: PRODUCER, SEND, CLOSE_PRODUCER.

ServerCnx owns one ProducerCommands and routes these frames to it; the
producers opened on the connection live here. SEND is on the hot path: it
decodes nothing beyond the command and hands the stored bytes to the
producer.
"""

from __future__ import annotations

import asyncio
import time
from functools import partial
from typing import Any, NamedTuple

from magnetar.broker import commands
from magnetar.broker.connection.context import CommandContext
from magnetar.broker.connection.limits import check_producer_limit
from magnetar.broker.errors import BrokerServiceError, ProducerIdInUse
from magnetar.broker.features.keywindow import idempotency_key
from magnetar.broker.features.replicated import is_replication_name
from magnetar.broker.policies.resolver import TopicPolicies
from magnetar.broker.schemas.types import from_wire, version_bytes
from magnetar.broker.service.broker_service import check_name, parse_topic
from magnetar.broker.storage.api import EARLIEST
from magnetar.broker.topics.base import Topic, is_persistent
from magnetar.broker.topics.publish_path import AccessMode, Producer
from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.batch_check import counts_problem, send_problem
from magnetar.proto.errors import ProtocolError, ServerError
from magnetar.proto.frames import Frame, Payload
from magnetar.proto.naming import validate_producer_name, validate_subscription_name
from magnetar.proto.send_scan import SendHead


class AttachedProducer(NamedTuple):
    producer: Producer
    topic: Topic
    # The registered schema's version (8 bytes), None for a producer without one.
    schema_version: bytes | None = None


class ProducerCommands:
    def __init__(self, cnx: CommandContext) -> None:
        self.cnx = cnx
        self.producers: dict[int, AttachedProducer] = {}
        # PRODUCER requests still running, by producer id (CLOSE_PRODUCER
        # cancels one that waits for exclusive access).
        self._requests: dict[int, asyncio.Task[Any]] = {}

    def handle_producer(self, frame: Frame) -> None:
        cmd = frame.command.producer
        pid = cmd.producer_id
        # Run at once (broker/eager.py): a new topic's load nearly always
        # finishes without waiting, and a task would add a turn of the loop
        # to every topic's creation (issue 43). Not a replicator's (it waits
        # under asyncio.timeout, which needs a task from the start) nor one
        # that may queue for exclusive access.
        eager = cmd.producer_access_mode != AccessMode.WaitForExclusive and not (
            is_replication_name(cmd.producer_name)
        )
        task = self.cnx.spawn(self._create_producer(cmd), cmd.request_id, "PRODUCER", eager)
        if task is not None:
            self._requests[pid] = task
            task.add_done_callback(partial(self._request_done, pid))

    def _request_done(self, pid: int, task: asyncio.Task[Any]) -> None:
        if self._requests.get(pid) is task:
            del self._requests[pid]

    async def _create_producer(self, cmd: pb.CommandProducer) -> None:
        cnx = self.cnx
        pid = cmd.producer_id
        existing = self.producers.get(pid)
        if existing is not None:
            if existing.topic.name == str(parse_topic(cmd.topic)):
                name = existing.producer.name
                cnx.write(
                    commands.producer_success(
                        cmd.request_id,
                        name,
                        existing.topic.last_sequence_id(name),
                        schema_version=existing.schema_version,
                    )
                )
                return
            raise ProducerIdInUse(pid)
        check_name(validate_producer_name, cmd.producer_name)
        await cnx.authorize("produce", cmd.topic)
        topic = await cnx.service.get_topic(cmd.topic)
        policies = await cnx.service.policies.resolve(topic.topic_name)
        if policies.encryption_required and not cmd.encrypted:
            raise BrokerServiceError(
                ServerError.NotAllowedError,
                f"encryption is required in namespace {topic.topic_name.namespace_name}"
                " (encryptionRequired) and this producer does not encrypt",
            )
        schema_version = await self._register_schema(cmd, topic, policies)
        if cmd.initial_subscription_name:
            await self._create_initial_subscription(topic, cmd.initial_subscription_name)
        name = cmd.producer_name or cnx.service.generate_producer_name()
        if is_replication_name(name):
            await topic.accept_replicator(name)
        if cmd.producer_access_mode == AccessMode.WaitForExclusive:
            await topic.wait_for_exclusive_access(
                partial(self._producer_queued, cmd.request_id, name, topic.name)
            )
        check_producer_limit(topic, policies.max_producers)
        producer = topic.add_producer(
            cnx,
            pid,
            name,
            access_mode=cmd.producer_access_mode,
            user_provided_name=cmd.user_provided_producer_name and bool(cmd.producer_name),
            epoch=cmd.epoch,
        )
        if cnx.is_closed:
            topic.remove_producer(producer)
            return
        self.producers[pid] = AttachedProducer(producer, topic, schema_version)
        cnx.log.info("producer created", topic=topic.name, producer=name, producer_id=pid)
        cnx.write(
            commands.producer_success(
                cmd.request_id,
                name,
                topic.last_sequence_id(name),
                schema_version=schema_version,
            )
        )

    async def _register_schema(
        self, cmd: pb.CommandProducer, topic: Topic, policies: TopicPolicies
    ) -> bytes | None:
        """Register or find the producer's schema; bytes producers (no schema)
        are accepted as Pulsar accepts them, without a version, unless schema
        validation is enforced and the topic has a schema."""
        schema = from_wire(cmd.schema) if cmd.HasField("schema") else None
        service = self.cnx.service
        if schema is None:
            if policies.schema_validation_enforced and await service.schemas.get(topic.topic_name):
                raise BrokerServiceError(
                    ServerError.IncompatibleSchema,
                    "a producer without a schema cannot connect to a topic with a schema"
                    " while schema validation is enforced",
                )
            return None
        version = await service.schemas.add(
            topic.topic_name, schema, may_add=policies.allow_auto_update_schema
        )
        return version_bytes(version)

    async def _create_initial_subscription(self, topic: Topic, name: str) -> None:
        """CommandProducer's initial_subscription_name (a dead letter
        producer's): the subscription is made from the earliest message if
        the topic has none of that name, so nothing sent before a consumer
        of it arrives is lost."""
        check_name(validate_subscription_name, name)
        if is_persistent(topic) and name not in topic.subscription_names():
            await topic.create_subscription(name, EARLIEST)
            self.cnx.log.info("initial subscription created", topic=topic.name, subscription=name)

    def _producer_queued(self, request_id: int, name: str, topic: str) -> None:
        self.cnx.log.info("producer waits for exclusive access", topic=topic, producer=name)
        self.cnx.write(commands.producer_success(request_id, name, ready=False))

    def handle_send(self, frame: Frame) -> None:
        send = frame.command.send
        payload = frame.payload
        attached = self._attached(send.producer_id)
        if payload is None:
            raise ProtocolError("SEND without a payload")
        size = len(payload.data)
        self.cnx.publish_started(size)
        producer = attached.producer
        try:
            # Parsed once here: a consumer's client cannot skip an entry whose
            # metadata it cannot parse, so such an entry is never stored.
            metadata = payload.metadata
        except ProtocolError as exc:
            self.cnx.log.info(
                "SEND refused: invalid message metadata",
                topic=attached.topic.name,
                producer=producer.name,
                detail=str(exc),
            )
            # ChecksumError is the one SEND_ERROR the official client fails
            # the message for instead of reconnecting and resending it (WIRE 5).
            producer.reject(
                send.sequence_id,
                ServerError.ChecksumError,
                f"invalid message metadata: {exc}",
                size,
            )
            return
        problem = send_problem(
            metadata, payload.data, payload.meta_offset + payload.meta_size, send.num_messages
        )
        chunks = metadata.num_chunks_from_msg
        self._publish(
            attached,
            problem,
            send.sequence_id,
            max(send.highest_sequence_id, metadata.highest_sequence_id),
            send.num_messages,
            payload,
            chunks > 1 and metadata.chunk_id < chunks - 1,
        )

    def handle_send_head(self, head: SendHead) -> None:
        """A SEND that send_scan read without protobuf: its metadata is known
        to parse, so only the batch check is left before the publish."""
        attached = self._attached(head.producer_id)
        data = head.data
        self.cnx.publish_started(len(data))
        batch_count = head.batch_count
        problem = counts_problem(
            None if batch_count < 0 else batch_count,
            head.num_chunks > 0,
            head.compression,
            head.uncompressed_size,
            False,  # encryption keys are read by protobuf (send_scan)
            data,
            head.payload_start,
            head.num_messages,
        )
        chunks = head.num_chunks
        self._publish(
            attached,
            problem,
            head.sequence_id,
            max(head.highest_sequence_id, head.meta_highest_sequence_id),
            head.num_messages,
            head,
            chunks > 1 and head.chunk_id < chunks - 1,
        )

    def _attached(self, producer_id: int) -> AttachedProducer:
        attached = self.producers.get(producer_id)
        if attached is None:
            raise ProtocolError(f"SEND for producer {producer_id}, which is not open")
        return attached

    def _publish(
        self,
        attached: AttachedProducer,
        problem: str | None,
        sequence_id: int,
        highest_sequence_id: int,
        num_messages: int,
        payload: Payload | SendHead,
        partial_chunk: bool,
    ) -> None:
        producer = attached.producer
        data = payload.data
        if problem is not None:
            why = "SEND refused: batch does not hold what its metadata says"
        elif (limits := attached.topic.publish_limits) is not None:
            problem = limits.refusal(data, time.time_ns() // 1_000_000)
            why = "SEND refused by the topic's policies"
        if problem is not None:
            # Permanent: ChecksumError is the one SEND_ERROR that fails the
            # message instead of a reconnect that would resend it (WIRE 5).
            self.cnx.log.info(
                why, topic=attached.topic.name, producer=producer.name, detail=problem
            )
            producer.reject(sequence_id, ServerError.ChecksumError, problem, len(data))
            if producer.replicated:
                # Nothing after a refused entry may be stored from a replicator
                # (its resend would then count as a duplicate): it starts over.
                attached.topic.remove_producer(producer)
                self.cnx.producer_closed_by_broker(producer.producer_id)
            return
        limiter = attached.topic.publish_rate
        if limiter is not None:
            pause = limiter.consume(num_messages or 1, len(data))
            if pause:
                self.cnx.throttle_reading(pause)
        window = producer.topic.key_window
        key = None
        if window is not None:
            if isinstance(payload, SendHead):
                payload = Payload.parse(data, verify_checksum=False)  # verified on receipt
            key = idempotency_key(payload, window.policy.property)
        producer.publish(
            sequence_id,
            highest_sequence_id,
            num_messages,
            data,
            partial_chunk=partial_chunk,
            idempotency_key=key,
        )

    def handle_close_producer(self, frame: Frame) -> None:
        cmd = frame.command.close_producer
        self.cnx.spawn(
            self._close_producer(cmd.producer_id, cmd.request_id), cmd.request_id, "CLOSE_PRODUCER"
        )

    async def _close_producer(self, producer_id: int, request_id: int) -> None:
        pending = self._requests.get(producer_id)
        if pending is not None:
            # A producer still queued for exclusive access would wait forever.
            pending.cancel()
            await asyncio.gather(pending, return_exceptions=True)
        attached = self.producers.pop(producer_id, None)
        if attached is not None:
            producer, topic = attached.producer, attached.topic
            topic.remove_producer(producer)
            self.cnx.log.info("producer closed", topic=topic.name, producer=producer.name)
        self.cnx.write(commands.success(request_id))

    def closed_by_broker(self, producer_id: int) -> None:
        """The topic closed this producer; forget it."""
        self.producers.pop(producer_id, None)

    def detach_all(self) -> None:
        """The connection is gone: every producer leaves its topic."""
        for producer, topic, _ in list(self.producers.values()):
            topic.remove_producer(producer)
        self.producers.clear()
