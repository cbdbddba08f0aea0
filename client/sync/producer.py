"""The blocking producer of the `pulsar`-shaped client (see __init__.py)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from magnetar.client.aio.checks import check_optional, check_type
from magnetar.client.aio.errors import AlreadyClosed, ProducerQueueIsFull, PulsarException, Result
from magnetar.client.aio.message import LOCAL_CLUSTER_ONLY, OutgoingMessage
from magnetar.client.aio.producer.partitioned import PartitionedProducer as _AioPartitioned
from magnetar.client.aio.producer.producer import Producer as _AioProducer
from magnetar.client.sync.accessors import ProducerAccessors
from magnetar.client.sync.loop import ClientLoop, Permits
from magnetar.client.sync.messages import MessageId
from magnetar.proto import ids as _ids

SendCallbackSync = Callable[[Result, "MessageId | None"], None]


def build_message(
    schema: Any,
    content: Any,
    properties: Mapping[str, str] | None,
    partition_key: str | None,
    ordering_key: str | None,
    sequence_id: int | None,
    replication_clusters: list[str] | None,
    disable_replication: bool,
    event_timestamp: int | None,
    deliver_at: int | None,
    deliver_after: timedelta | None,
) -> OutgoingMessage:
    null_value = content is None
    if null_value:
        payload = b""
    else:
        payload = schema.encode(content) if schema is not None else content
        if not isinstance(payload, bytes | bytearray | memoryview):
            # A TypeError, as the official BytesSchema raises for it.
            raise TypeError(f"content must be bytes, got {type(payload).__name__}")
        payload = bytes(payload)
    if (
        properties is not None
        or partition_key is not None
        or ordering_key is not None
        or sequence_id is not None
        or replication_clusters is not None
        or disable_replication is not False
        or event_timestamp is not None
        or deliver_at is not None
        or deliver_after is not None
    ):  # a send with only the content (the common one) has nothing to check
        check_optional(dict, properties, "properties")
        for name, text in (("partition_key", partition_key), ("ordering_key", ordering_key)):
            check_optional(str, text, name)
        for name, number in (
            ("sequence_id", sequence_id),
            ("event_timestamp", event_timestamp),
            ("deliver_at", deliver_at),
        ):
            check_optional(int, number, name)
        check_optional(list, replication_clusters, "replication_clusters")
        check_type(bool, disable_replication, "disable_replication")
        check_optional(timedelta, deliver_after, "deliver_after")
    if deliver_after is not None:
        deliver_at = int(time.time() * 1000 + deliver_after.total_seconds() * 1000)
    replicate_to = [LOCAL_CLUSTER_ONLY] if disable_replication else replication_clusters
    return OutgoingMessage(
        payload,
        properties=properties,
        partition_key=partition_key,
        ordering_key=ordering_key,
        sequence_id=sequence_id,
        event_time=event_timestamp,
        deliver_at=deliver_at,
        replicate_to=replicate_to,
        null_value=null_value,
    )


def _wrap_callback(
    callback: SendCallbackSync,
) -> Callable[[PulsarException | None, _ids.MessageId | None], None]:
    def answered(error: PulsarException | None, msg_id: _ids.MessageId | None) -> None:
        if error is not None:
            callback(error.result, None)
        else:
            assert msg_id is not None
            callback(Result.Ok, MessageId.wrap(msg_id))

    return answered


class Producer(ProducerAccessors):
    """Blocking producer; `send_async` callbacks run on the client's loop thread."""

    def __init__(
        self,
        client: ClientLoop,
        producer: _AioProducer | _AioPartitioned,
        schema: Any,
        permits: Permits,
        block_if_queue_full: bool,
    ) -> None:
        self._client = client
        self._producer = producer
        self._schema = schema
        self._permits = permits
        self._block = block_if_queue_full
        self._submit = client.submit
        # The core tells us when messages leave its queue, answered or failed.
        cores = producer.producers if isinstance(producer, _AioPartitioned) else [producer]
        for core in cores:
            core.release_listener = permits.release

    def send(
        self,
        content: Any,
        properties: Mapping[str, str] | None = None,
        partition_key: str | None = None,
        ordering_key: str | None = None,
        sequence_id: int | None = None,
        replication_clusters: list[str] | None = None,
        disable_replication: bool = False,
        event_timestamp: int | None = None,
        deliver_at: int | None = None,
        deliver_after: timedelta | None = None,
    ) -> MessageId:
        """Publish and block until the broker acknowledged the message."""
        import concurrent.futures

        self._check_open()
        msg = build_message(
            self._schema, content, properties, partition_key, ordering_key, sequence_id,
            replication_clusters, disable_replication, event_timestamp, deliver_at, deliver_after,
        )  # fmt: skip
        future: concurrent.futures.Future[MessageId] = concurrent.futures.Future()

        def answered(error: PulsarException | None, msg_id: _ids.MessageId | None) -> None:
            if error is not None:
                future.set_exception(error)
            else:
                assert msg_id is not None
                future.set_result(MessageId.wrap(msg_id))

        if not self._permits.acquire(self._block):
            raise ProducerQueueIsFull(f"producer on {self.topic()} has too many pending messages")
        self._submit(self._send_in_loop, msg, answered)
        return future.result()

    def send_async(
        self,
        content: Any,
        callback: SendCallbackSync | None,
        properties: Mapping[str, str] | None = None,
        partition_key: str | None = None,
        ordering_key: str | None = None,
        sequence_id: int | None = None,
        replication_clusters: list[str] | None = None,
        disable_replication: bool = False,
        event_timestamp: int | None = None,
        deliver_at: int | None = None,
        deliver_after: timedelta | None = None,
    ) -> None:
        """Queue a message; `callback(result, message_id)` runs once it is answered.

        Callbacks run on the client's loop thread, as the official client runs
        them on its I/O thread; they must not block.
        """
        self._check_open()
        if (
            content.__class__ is bytes
            and self._schema is None
            and not (properties or partition_key or ordering_key or replication_clusters)
            and sequence_id is None
            and not (disable_replication or event_timestamp or deliver_at or deliver_after)
        ):
            msg = OutgoingMessage(content)  # the common case, kept cheap
        else:
            msg = build_message(
                self._schema, content, properties, partition_key, ordering_key, sequence_id,
                replication_clusters, disable_replication, event_timestamp, deliver_at,
                deliver_after,
            )  # fmt: skip
        if not self._permits.acquire(self._block):
            if callback is not None:
                callback(Result.ProducerQueueIsFull, None)
            return
        answered = None if callback is None else _wrap_callback(callback)
        self._submit(self._send_in_loop, msg, answered)

    def _check_open(self) -> None:
        if self._client.closed:
            raise AlreadyClosed("the client is closed")

    def _send_in_loop(
        self,
        msg: OutgoingMessage,
        answered: Callable[[PulsarException | None, _ids.MessageId | None], None] | None,
    ) -> None:
        try:
            self._producer.send_async(msg, answered)
        except PulsarException as exc:
            # Refused before it was queued: the core never counted it.
            self._permits.release()
            if answered is not None:
                answered(exc, None)

    def _call(self, fn: Callable[[], Any]) -> Any:
        # Runs after everything submitted before it (the submitter keeps order).
        async def run() -> Any:
            return await fn()

        return self._client.run_ordered(run)

    def flush(self) -> None:
        """Send what is batched and wait until every pending message is answered."""
        self._check_open()
        self._call(self._producer.flush)

    def close(self) -> None:
        if not self._client.closed:  # closing the client closed its producers
            self._call(self._producer.close)
