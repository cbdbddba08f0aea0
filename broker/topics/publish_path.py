"""Broker-side producer: the publish path and its receipts (WIRE 5).

SEND -> append the stored bytes to the managed ledger -> SEND_RECEIPT once the
entry is durable. Appends are group-committed by storage; receipts leave in
SEND order per producer even if appends were to complete out of order.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import Protocol

import structlog

from magnetar.broker import commands
from magnetar.broker.counters import RateCounter
from magnetar.broker.endpoint import ClientConnection
from magnetar.broker.features.dedup import DUPLICATE, DupStatus, MessageDeduplication
from magnetar.broker.features.keywindow import KeyWindowIndex
from magnetar.broker.features.markers import MarkerHorizon, has_marker_tag
from magnetar.broker.features.replicated import is_replication_name
from magnetar.broker.log_throttle import RateLimitedLog
from magnetar.broker.storage.api import (
    ManagedLedgerClosed,
    ManagedLedgerFenced,
    Position,
    StorageError,
)
from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.errors import ServerError

log = structlog.get_logger(__name__)

AccessMode = pb.ProducerAccessMode
# Told where a remote cluster's replicator stored a marker entry, and its bytes.
MarkerListener = Callable[[Position, bytes], None]
# A full disk fails every publish alike: one line per topic per interval.
_FAILURE_LOG = RateLimitedLog(interval=10.0)


class PublishTarget(Protocol):
    """The part of a topic its producers use (a Topic is one)."""

    @property
    def name(self) -> str: ...

    @property
    def partition_index(self) -> int: ...

    def append(self, data: bytes, num_messages: int) -> asyncio.Future[Position]: ...

    @property
    def deduplication(self) -> MessageDeduplication | None:
        """Set while deduplication is on for the topic (it can change at any time)."""
        ...

    @property
    def key_window(self) -> KeyWindowIndex | None:
        """Set while the topic has a dedupKeyWindow policy."""
        ...

    @property
    def replicated_dedup(self) -> MessageDeduplication | None:
        """Set once a replicator may publish: its sequence ids are
        deduplicated whatever the deduplication policy says (issue 45)."""
        ...

    @property
    def marker_listener(self) -> MarkerListener | None:
        """Told of the marker entries replicators store (issue 45.4)."""
        ...

    @property
    def marker_horizon(self) -> MarkerHorizon:
        """Moved when a replicator stores a marker (dispatch looks for them)."""
        ...


class SendRejected(Exception):
    """A SEND refused before storage (bad metadata): answered in SEND order."""

    def __init__(self, code: ServerError, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class _PendingPublish:
    __slots__ = ("dedup", "future", "highest_sequence_id", "sequence_id", "size")

    def __init__(
        self,
        sequence_id: int,
        highest_sequence_id: int,
        future: asyncio.Future[Position],
        size: int,
        dedup: MessageDeduplication | None = None,
    ) -> None:
        self.sequence_id = sequence_id
        self.size = size  # what the connection counts as pending until answered
        self.highest_sequence_id = highest_sequence_id
        # Told when the entry is durable (deduplication was on at SEND time).
        self.dedup = dedup
        self.future = future


class Producer:
    def __init__(
        self,
        topic: PublishTarget,
        producer_id: int,
        name: str,
        cnx: ClientConnection,
        *,
        access_mode: int = AccessMode.Shared,
        user_provided_name: bool = False,
        epoch: int = 0,
    ) -> None:
        self.topic = topic
        self.producer_id = producer_id
        self.name = name
        self.cnx = cnx
        self.access_mode = access_mode
        self.user_provided_name = user_provided_name
        self.epoch = epoch
        self.is_closed = False
        self._pending: deque[_PendingPublish] = deque()
        self._partition = topic.partition_index
        # A remote cluster's replicator (features/replicated.py), and what
        # it stored (the replication stats' rate in).
        self.replicated = is_replication_name(name)
        self.replicated_in = RateCounter() if self.replicated else None

    def __repr__(self) -> str:
        return f"Producer({self.producer_id}, {self.name!r}, {self.topic.name})"

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    def publish(
        self,
        sequence_id: int,
        highest_sequence_id: int,
        num_messages: int,
        data: bytes,
        *,
        partial_chunk: bool = False,
        idempotency_key: str | None = None,
    ) -> None:
        """Append one entry; the receipt follows when it is durable.

        With deduplication on, a duplicate gets a receipt for (-1, -1) and is
        not stored; one still in flight gets an error and is resent later
        (SEMANTICS 7.2). Chunks before a message's last share its sequence id
        and pass unchecked (WIRE 5).
        """
        dedup = self.topic.replicated_dedup if self.replicated else self.topic.deduplication
        if dedup is not None and not partial_chunk:
            status = dedup.check(self.name, sequence_id, highest_sequence_id)
            if status is DupStatus.DUPLICATE:
                done: asyncio.Future[Position] = asyncio.get_running_loop().create_future()
                done.set_result(DUPLICATE)
                self._track(_PendingPublish(sequence_id, highest_sequence_id, done, len(data)))
                return
            if status is DupStatus.UNKNOWN:
                self.reject(
                    sequence_id,
                    ServerError.PersistenceError,
                    f"sequence id {sequence_id} of {self.name!r} is still being persisted; "
                    "resend later",
                    len(data),
                )
                return
        else:
            dedup = None
        window = self.topic.key_window if idempotency_key is not None else None
        if window is not None and idempotency_key is not None:
            future = self._first_copy(window, idempotency_key, data, num_messages)
        else:
            future = self.topic.append(data, num_messages)
        if self.replicated:
            self._replicated_stored(future, num_messages, data)
        self._track(_PendingPublish(sequence_id, highest_sequence_id, future, len(data), dedup))

    def _replicated_stored(
        self, future: asyncio.Future[Position], num_messages: int, data: bytes
    ) -> None:
        """A remote cluster's replicator stored an entry (not a duplicate):
        counted for the replication stats' rate in; a marker moves the
        topic's marker horizon and goes to the replication layer once stored.
        Only replicators come here: other producers pay nothing for it."""
        assert self.replicated_in is not None  # set for every replicator
        self.replicated_in.add(num_messages, len(data))
        if has_marker_tag(data):
            self.topic.marker_horizon.marker_stored()
            listener = self.topic.marker_listener
            if listener is not None:
                future.add_done_callback(partial(_marker_stored, listener, data))

    def _track(self, item: _PendingPublish) -> None:
        """Queue a publish for its answer. Only the head of the queue has a
        done-callback: answers leave in SEND order, so nothing behind the head
        can be answered before it, and appends of one group commit complete
        together, so one callback answers the whole group."""
        pending = self._pending
        pending.append(item)
        if len(pending) == 1:
            if item.future.done():
                self._on_append_done(item.future)
            else:
                item.future.add_done_callback(self._on_append_done)

    def _first_copy(
        self, window: KeyWindowIndex, key: str, data: bytes, num_messages: int
    ) -> asyncio.Future[Position]:
        """Key-window deduplication: the receipt of a repeated key names where
        its first copy is (or is about to be) stored; nothing is stored again."""
        found = window.lookup(key)
        if found is None:
            future = self.topic.append(data, num_messages)
            window.storing(key, future)
            return future
        answer: asyncio.Future[Position] = asyncio.get_running_loop().create_future()
        if isinstance(found, Position):
            answer.set_result(found)
        else:
            found.add_done_callback(partial(_copy_outcome, answer))
        return answer

    def reject(self, sequence_id: int, code: ServerError, message: str, size: int) -> None:
        """Answer a SEND with SEND_ERROR without storing it, after the receipts
        of earlier SENDs (the official client matches errors to the head of
        its pending queue and drops the connection otherwise)."""
        future: asyncio.Future[Position] = asyncio.get_running_loop().create_future()
        future.set_exception(SendRejected(code, message))
        self._track(_PendingPublish(sequence_id, sequence_id, future, size))

    def _on_append_done(self, future: asyncio.Future[Position]) -> None:
        if not future.cancelled():
            future.exception()  # retrieved here even when nobody waits any more
        if self.is_closed:
            return
        # Answer every completed append at the head, keeping SEND order.
        pending = self._pending
        frames: list[bytes] = []
        answered = size = 0
        while pending and pending[0].future.done():
            item = pending.popleft()
            frames.append(self._answer(item))
            answered += 1
            size += item.size
        if answered:
            self.cnx.publish_completed(size, answered)
            self.cnx.write_frames(frames)
        if pending:
            pending[0].future.add_done_callback(self._on_append_done)

    def _answer(self, item: _PendingPublish) -> bytes:
        future = item.future
        if not future.cancelled() and future.exception() is None:
            position = future.result()
            if item.dedup is not None:
                item.dedup.persisted_entry(
                    self.name, max(item.sequence_id, item.highest_sequence_id), position
                )
            return commands.send_receipt(
                self.producer_id,
                item.sequence_id,
                item.highest_sequence_id,
                position,
                self._partition,
            )
        exc = None if future.cancelled() else future.exception()
        if isinstance(exc, SendRejected):
            return commands.send_error(self.producer_id, item.sequence_id, exc.code, exc.message)
        if isinstance(exc, ManagedLedgerClosed | ManagedLedgerFenced):
            message = f"topic {self.topic.name} is not writable: {exc}"
        elif isinstance(exc, StorageError):
            message = f"append failed: {exc}"
        else:
            message = f"append failed: {exc!r}"
        suppressed = _FAILURE_LOG.admit(self.topic.name)
        if suppressed is not None:
            log.warning(
                "publish failed",
                topic=self.topic.name,
                producer=self.name,
                error=message,
                suppressed_since_last=suppressed,
            )
        return commands.send_error(
            self.producer_id, item.sequence_id, ServerError.PersistenceError, message
        )

    def close(self) -> None:
        """Detach; appends already made still complete but no receipt is sent."""
        if self.is_closed:
            return
        self.is_closed = True
        pending = self._pending
        if pending:
            self.cnx.publish_completed(sum(item.size for item in pending), len(pending))
        for item in pending:
            # Only the head had a callback; every outcome is still retrieved,
            # and a deduplicated one that lands still counts as persisted:
            # else its resend (after the reconnect) would be "in flight"
            # for ever.
            if item.dedup is None:
                item.future.add_done_callback(_retrieve)
            else:
                highest = max(item.sequence_id, item.highest_sequence_id)
                item.future.add_done_callback(
                    partial(_persisted_late, item.dedup, self.name, highest)
                )
        pending.clear()


def _retrieve(future: asyncio.Future[Position]) -> None:
    if not future.cancelled():
        future.exception()


def _persisted_late(
    dedup: MessageDeduplication, name: str, highest: int, future: asyncio.Future[Position]
) -> None:
    """An append of a closed producer completed: deduplication hears of it."""
    if future.cancelled() or future.exception() is not None:
        return
    dedup.persisted_entry(name, highest, future.result())


def _marker_stored(listener: MarkerListener, data: bytes, future: asyncio.Future[Position]) -> None:
    """A replicated marker entry is stored: the replication layer acts on it."""
    if future.cancelled() or future.exception() is not None:
        return
    try:
        listener(future.result(), data)
    except Exception:  # a listener's bug must not break the publish path
        log.exception("marker listener failed")


def _copy_outcome(target: asyncio.Future[Position], source: asyncio.Future[Position]) -> None:
    if target.done():
        return
    if source.cancelled():
        target.cancel()
    elif (exc := source.exception()) is not None:
        target.set_exception(exc)
    else:
        target.set_result(source.result())
