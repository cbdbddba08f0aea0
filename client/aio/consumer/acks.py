"""ConsumerAcks: the acknowledgement side of one Consumer (SEM-3).

It holds the consumer's three trackers and the batch bookkeeping:

- the AckGroupingTracker (SEM-3.4), flushed by the consumer's Ticker, at
  `max_pending` and on close; with ack receipts each flush is a request
  whose answer settles the acks' futures;
- the UnAckedMessageTracker (ack timeout, SEM-3.6), fed when a message
  reaches the application;
- the NegativeAcksTracker (SEM-3.5);
- per batch entry, the indexes handed out and not yet acked: without
  batch-index acks an entry is acked once all of them are (SEM-3.3).

Redelivery requests (SEM-3.7) go out from here too. The consumer keeps the
routing (retry topic, cumulative refusal) and calls in with ids or messages.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from magnetar.client.aio.config import ConsumerConfiguration
from magnetar.client.aio.consumer.ack_grouping import AckGroupingTracker, PendingAcks
from magnetar.client.aio.consumer.dead_letter import LastChance
from magnetar.client.aio.consumer.nack_tracker import NegativeAcksTracker
from magnetar.client.aio.consumer.stats import ConsumerStats
from magnetar.client.aio.consumer.unacked_tracker import UnAckedMessageTracker
from magnetar.client.aio.enums import ConsumerType
from magnetar.client.aio.errors import ConnectError, PulsarException, from_server_error
from magnetar.client.aio.message import Message
from magnetar.client.aio.net import commands
from magnetar.client.aio.net.connection import ClientConnection
from magnetar.client.aio.ticker import Job
from magnetar.proto.ids import MessageId

SHARED_TYPES = (ConsumerType.Shared, ConsumerType.KeyShared)

AckTarget = Message | MessageId


class AckingConsumer(Protocol):
    """What the acks need from the consumer that owns them: its id, its
    current connection, and its redelivery routing (SEM-3.7)."""

    @property
    def consumer_id(self) -> int: ...
    @property
    def cnx(self) -> ClientConnection | None: ...
    def redeliver(self, ids: Iterable[MessageId]) -> None: ...


class ConsumerAcks:
    def __init__(
        self,
        consumer: AckingConsumer,
        conf: ConsumerConfiguration,
        stats: ConsumerStats,
        log: Any,
    ) -> None:
        self._consumer = consumer
        self._log = log
        self.conf = conf
        self.stats = stats
        self.grouping = AckGroupingTracker(
            consumer.consumer_id,
            group_time=conf.ack_group_time_ms / 1000.0,
            max_pending=conf.ack_group_max_size,
        )
        self.unacked = (
            UnAckedMessageTracker(conf.ack_timeout, conf.ack_timeout_tick_time_ms / 1000.0)
            if conf.ack_timeout > 0
            else None
        )
        self.nacks = NegativeAcksTracker(conf.negative_ack_redelivery_delay_ms / 1000.0)
        # Messages on their last delivery (dead letter policy, SEM-6.1).
        self.last_chance: LastChance | None = None
        # (ledger, entry) of a batch -> indexes handed out and not yet acked.
        self.batch_unacked: dict[tuple[int, int], set[int]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._poke: Callable[[], None] = lambda: None

    def jobs(self, poke: Callable[[], None]) -> list[Job]:
        """The periodic jobs (ack flush, nack delay, ack timeout) for the consumer's Ticker."""
        self._poke = poke
        grouping, nacks, unacked = self.grouping, self.nacks, self.unacked
        jobs = [
            Job("nack", lambda: nacks.tick_time, self._nack_tick, lambda: bool(len(nacks))),
        ]
        if not grouping.immediate:
            jobs.insert(
                0,
                Job(
                    "ack-flush",
                    lambda: grouping.group_time,
                    self.flush,
                    lambda: bool(grouping.pending_count),
                ),
            )
        if unacked is not None:
            jobs.append(
                Job(
                    "ack-timeout",
                    lambda: unacked.tick_time,
                    self._unacked_tick,
                    lambda: bool(len(unacked)),
                )
            )
        return jobs

    def _nack_tick(self) -> None:
        due = self.nacks.tick()
        if due:
            self._consumer.redeliver(due)

    def _unacked_tick(self) -> None:
        assert self.unacked is not None
        expired = self.unacked.tick()
        if expired:
            self._log.info("ack timeout: redelivering", count=len(expired))
            self._consumer.redeliver(expired)

    # -- what the consumer tells us ----------------------------------------

    def delivered(self, messages: Sequence[Message]) -> None:
        """`messages` reached the application: their ack timeouts start."""
        unacked = self.unacked
        if unacked is None:
            return
        was_empty = not len(unacked)
        for msg in messages:
            for msg_id in msg.ack_ids:
                unacked.add(msg_id)
        if was_empty and len(unacked):
            self._poke()

    def forget_delivered(self) -> None:
        """What was handed out will come again (resubscribe, seek, redeliver all)."""
        self.batch_unacked.clear()
        if self.unacked is not None:
            self.unacked.clear()

    def on_disconnected(self) -> None:
        # Grouped acks not sent are lost with the connection: the broker redelivers.
        for waiter in self.grouping.clear():
            if not waiter.done():
                waiter.set_exception(ConnectError("disconnected before the ack was sent"))

    # -- individual acks -----------------------------------------------------

    def ack_ids(self, ids: Iterable[MessageId]) -> asyncio.Future[None] | None:
        """Acknowledge ids (SEM-3.1); a future for the broker's answer with ack receipts."""
        waiter = self._new_waiter()
        was_idle = not self.grouping.pending_count
        flush = False
        for msg_id in ids:
            flush |= self._ack_id(msg_id)
        return self._after_ack(waiter, flush, was_idle)

    def _ack_id(self, msg_id: MessageId) -> bool:
        if self.unacked is not None:
            self.unacked.remove(msg_id)
        if self.last_chance:
            self.last_chance.forget(msg_id)
        self.nacks.remove(msg_id)
        self.stats.acked += 1
        if msg_id.batch_index >= 0:
            key = msg_id.entry_key()
            if self.conf.batch_index_ack_enabled:
                return self.grouping.add_batch_index(msg_id)
            indexes = self.batch_unacked.get(key)
            if indexes is None:
                return False
            indexes.discard(msg_id.batch_index)
            if indexes:
                return False
            del self.batch_unacked[key]
        return self.grouping.add_individual(msg_id.entry_key())

    def ack_many(self, targets: Sequence[AckTarget]) -> None:
        """Acknowledge several messages or ids without receipts (the blocking
        facade's bulk path): the per-message work is a set update."""
        grouping = self.grouping
        was_idle = not grouping.pending_count
        batch_unacked = self.batch_unacked
        # Trackers to update, or batch-index acks: the per-id path.
        slow = (
            self.unacked is not None
            or bool(len(self.nacks))
            or self.conf.batch_index_ack_enabled
            or bool(self.last_chance)
        )
        acked = 0
        for target in targets:
            if slow or isinstance(target, MessageId):
                ids = target.ack_ids if isinstance(target, Message) else (target,)
                for msg_id in ids:
                    if self._ack_id(msg_id):
                        self.flush()
                continue
            entry = target.entry
            if entry.chunk_ids is not None:
                for msg_id in entry.chunk_ids:
                    if self._ack_id(msg_id):
                        self.flush()
                continue
            acked += 1
            index = target.batch_index
            key = entry.key
            if index >= 0:
                indexes = batch_unacked.get(key)
                if indexes is None:
                    continue
                indexes.discard(index)
                if indexes:
                    continue
                del batch_unacked[key]
            if grouping.add_individual(key):
                self.flush()
        self.stats.acked += acked
        if was_idle and grouping.pending_count:
            self._poke()  # the flush job starts; later acks ride on it

    def _new_waiter(self) -> asyncio.Future[None] | None:
        if not self.conf.ack_receipt_enabled:
            return None
        return asyncio.get_running_loop().create_future()

    def _after_ack(
        self, waiter: asyncio.Future[None] | None, flush: bool, was_idle: bool
    ) -> asyncio.Future[None] | None:
        if waiter is not None:
            self.grouping.wait(waiter)
        if flush:
            self.flush()
        elif was_idle or waiter is not None:
            self._poke()  # the flush job starts; later acks ride on it
        return waiter

    # -- cumulative acks -------------------------------------------------------

    def ack_cumulative(self, msg_id: MessageId) -> asyncio.Future[None] | None:
        """SEM-3.2: everything up to `msg_id` (the consumer checked the subscription type)."""
        if self.unacked is not None:
            self.unacked.remove_up_to(msg_id)
        if self.last_chance:
            self.last_chance.forget_up_to(msg_id)
        key = msg_id.entry_key()
        if self.batch_unacked:
            for older in [k for k in self.batch_unacked if k < key]:
                del self.batch_unacked[older]
        self.stats.acked += 1
        was_idle = not self.grouping.pending_count
        position = msg_id
        if msg_id.batch_index >= 0 and not self.conf.batch_index_ack_enabled:
            size = msg_id.batch_size
            if size <= 0 or msg_id.batch_index < size - 1:
                # Part of the batch stays unacked: ack up to the entry before it.
                if msg_id.entry_id <= 0:
                    return self._after_ack(self._new_waiter(), False, was_idle)
                position = MessageId(msg_id.ledger_id, msg_id.entry_id - 1, msg_id.partition)
            else:
                position = MessageId(msg_id.ledger_id, msg_id.entry_id, msg_id.partition)
        waiter = self._new_waiter()
        return self._after_ack(waiter, self.grouping.add_cumulative(position), was_idle)

    # -- sending -----------------------------------------------------------------

    def flush(self) -> None:
        for pending in self.grouping.take():
            self._send(pending)

    def _send(self, pending: PendingAcks) -> None:
        cnx = self._consumer.cnx
        if cnx is None or cnx.is_closed:
            for waiter in pending.waiters:
                if not waiter.done():
                    waiter.set_exception(ConnectError("not connected: the ack was not sent"))
            return
        if not self.conf.ack_receipt_enabled:
            cnx.send_command(pending.command)
            for waiter in pending.waiters:
                if not waiter.done():
                    waiter.set_result(None)
            return
        request_id = cnx.new_request_id()
        pending.command.request_id = request_id
        task = asyncio.get_running_loop().create_task(self._request(cnx, pending, request_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _request(self, cnx: ClientConnection, pending: PendingAcks, request_id: int) -> None:
        error: PulsarException | None = None
        try:
            frame = await cnx.request(pending.command, request_id)
            answer = frame.command.ackResponse
            if answer.HasField("error"):
                error = from_server_error(answer.error, answer.message)
        except PulsarException as exc:
            error = exc
        for waiter in pending.waiters:
            if waiter.done():
                continue
            if error is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(error)

    def send_validation_ack(self, ledger: int, entry: int, error: int) -> None:
        """Tell the broker an entry cannot be consumed (checksum, decompression)."""
        cnx = self._consumer.cnx
        if cnx is None:
            return
        cnx.send_command(commands.validation_ack(self._consumer.consumer_id, ledger, entry, error))

    async def close(self) -> None:
        """Wait for the ack requests in flight (ack receipts)."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- negative acks and redelivery ------------------------------------------

    def negative(self, ids: Iterable[MessageId]) -> None:
        """SEM-3.5: redeliver after the nack delay; no ack-timeout redelivery on top."""
        was_empty = not len(self.nacks)
        for msg_id in ids:
            if self.unacked is not None:
                self.unacked.remove(msg_id)
            self.nacks.add(msg_id)
        self.stats.nacked += 1
        if was_empty:
            self._poke()

    def request_redelivery(self, ids: Iterable[MessageId]) -> None:
        """SEM-3.7 for Shared / Key_Shared: name the entries to redeliver."""
        entries = sorted({m.entry_key() for m in ids})
        cnx = self._consumer.cnx
        if not entries or cnx is None:
            return  # a reconnect redelivers everything unacked anyway
        self.stats.redelivery_requests += 1
        cnx.send_command(commands.redeliver_unacknowledged(self._consumer.consumer_id, entries))
