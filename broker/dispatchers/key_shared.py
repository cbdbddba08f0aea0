"""Key_Shared subscription dispatch (SEM-4.4).

Every entry is routed by its sticky key's hash to the consumer a selector
names (selectors.py). The hash is computed once, when the entry is first
read, and travels with it: held entries keep it beside the entry, and
entries handed out keep it in `_hash_of` until acked, so a redelivery is
routed without parsing again.

Ordering, per key hash:
- Entries read wait in one queue per owner, in position order, and a
  consumer takes from the head of its own queue while it has permits, its
  socket is writable and the join rule lets it. A consumer that cannot take
  holds back only its own keys; the others' entries go on. At most
  `key_shared_look_ahead` entries are held; reading stops there (Pulsar
  replays what it could not send; this bounds how far the other keys run
  ahead of a stuck consumer). Only consumers with permits are visited, so a
  full look-ahead costs nothing per read.
- When the owners change (a consumer comes or goes) the queues are merged and
  split again by position, so every key keeps its order.
- Redelivered positions (a consumer left, or asked) are merged into the
  queues by position, so they go to the key's current owner before anything
  later of that key; while some are still waiting to be read, their keys
  wait.
- SEM-4.4.4: a consumer that joins while others hold unacked messages gets
  two positions: its mark, the earliest position not yet dispatched (the
  cursor's read position, or an earlier held or queued entry), and its
  release point, the read position. It gets nothing at or after the mark
  until nothing dispatched before the release point is in flight any more:
  entries read before it joined may have gone out after a held one, so the
  mark alone does not cover them. A delayed message not delivered yet is not
  in flight (Pulsar's rule), so it does not hold a joiner back.
  allow_out_of_order_delivery on the consumer lifts this.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

import structlog

from magnetar.broker.dispatchers.base import DispatcherSettings, PersistentDispatcher
from magnetar.broker.dispatchers.consumer import Consumer, KeySharedMode, KeySharedPolicy
from magnetar.broker.dispatchers.entries import key_hash_and_deliver_at
from magnetar.broker.dispatchers.selectors import ConsumerSelector, new_selector
from magnetar.broker.errors import ConsumerBusyError
from magnetar.broker.storage.api import Entry, ManagedCursor, ManagedLedger, Position

log = structlog.get_logger(__name__)

_DEFAULT_POLICY = KeySharedPolicy()
_MODE_NAMES = {int(value): name for name, value in KeySharedMode.items()}


def _mode_name(mode: int) -> str:
    return _MODE_NAMES.get(mode, str(mode))


class _Join(NamedTuple):
    mark: Position
    release: Position


class KeyedEntry(NamedTuple):
    """An entry read from storage with its sticky key hash, parsed once."""

    position: Position
    key_hash: int
    entry: Entry


class KeySharedDispatcher(PersistentDispatcher):
    supports_delayed_delivery = True
    supports_unacked_limits = True

    def __init__(
        self, ledger: ManagedLedger, cursor: ManagedCursor, settings: DispatcherSettings
    ) -> None:
        super().__init__(ledger, cursor, settings)
        self.consistent_hashing = settings.key_shared_consistent_hashing
        self.look_ahead = max(settings.key_shared_look_ahead, 1)
        self.mode: int = KeySharedMode.AUTO_SPLIT
        self.selector: ConsumerSelector = self._new_selector(self.mode)
        # Read but not dispatched yet, per owner (None: no owner, a sticky
        # gap), each in position order.
        self._queues: dict[Consumer | None, deque[KeyedEntry]] = {}
        # Key hash of every entry handed out and not acked yet (and of delayed
        # ones), so a redelivery needs no parse.
        self._hash_of: dict[Position, int] = {}
        # SEM-4.4.4: consumer -> (the first position it may not have yet,
        # the position before which nothing may be in flight to release it).
        self._joined: dict[Consumer, _Join] = {}

    def _new_selector(self, mode: int) -> ConsumerSelector:
        return new_selector(mode, consistent_hashing=self.consistent_hashing)

    @property
    def held(self) -> int:
        """Entries read and waiting for their key's consumer."""
        return sum(len(q) for q in self._queues.values())

    # ------------------------------------------------------------ consumers

    def add_consumer(self, consumer: Consumer) -> None:
        policy = consumer.key_shared or _DEFAULT_POLICY
        if not self.consumers and policy.mode != self.mode:
            self.mode = policy.mode
            self.selector = self._new_selector(self.mode)
        elif policy.mode != self.mode:
            raise ConsumerBusyError(
                f"Key_Shared subscription {self.name!r} is "
                f"{_mode_name(self.mode)}; cannot attach a "
                f"{_mode_name(policy.mode)} consumer"
            )
        self.selector.add_consumer(consumer)  # ConsumerAssignError: nothing changed
        self._limit_consumer(consumer)
        if not policy.allow_out_of_order_delivery and self.consumers:
            release = self.cursor.read_position
            if not self._nothing_in_flight_before(release):
                mark = self._first_undispatched()
                self._joined[consumer] = _Join(mark, release)
                log.debug(
                    "key_shared consumer held back until earlier messages are acked",
                    subscription=self.name,
                    consumer=consumer.name,
                    mark=str(mark),
                    release=str(release),
                )
        self.consumers.append(consumer)
        self._regroup()
        self.wake()

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer not in self.consumers:
            return
        self.consumers.remove(consumer)
        self.selector.remove_consumer(consumer)
        self._joined.pop(consumer, None)
        self._regroup()
        self._give_back(consumer.take_pending())
        self.wake()  # its keys have new owners, who may take held entries

    def _first_undispatched(self) -> Position:
        mark = self.cursor.read_position
        for queue in self._queues.values():
            if queue and queue[0].position < mark:
                mark = queue[0].position
        first = self.replay.first()
        if first is not None and first < mark:
            mark = first
        return mark

    def _regroup(self, extra: Iterable[KeyedEntry] = ()) -> None:
        """Split the held entries (and `extra`, sorted) by their owners now."""
        merged = heapq.merge(*self._queues.values(), extra)
        queues: dict[Consumer | None, deque[KeyedEntry]] = {}
        _queue_by_owner(queues, merged, self.selector.select)
        self._queues = queues

    # ---------------------------------------------------------------- acks

    def on_ack(self, positions: Sequence[Position]) -> None:
        super().on_ack(positions)
        hash_of = self._hash_of
        for position in positions:
            hash_of.pop(position, None)
        # Only an ack before some release point can release a joiner.
        if self._joined and positions and self._release_joined(min(positions)):
            self.wake()

    def _release_joined(self, acked: Position | None = None, *, scan: bool = True) -> bool:
        """Drop the joins nothing before whose release point is in flight now
        (with `scan` off, only those everything before which is acked: the
        check a dispatch round can afford)."""
        released = [
            consumer
            for consumer, join in self._joined.items()
            if (acked is None or acked < join.release)
            and self._nothing_in_flight_before(join.release, scan=scan)
        ]
        for consumer in released:
            del self._joined[consumer]
        return bool(released)

    def _nothing_in_flight_before(self, position: Position, *, scan: bool = True) -> bool:
        """Whether nothing dispatched before `position` is unacked: pending on
        a consumer or given back and waiting to go out again. Everything acked
        is the cheap answer. Entries read and not dispatched yet are not in
        flight (the joiner's mark keeps it from them), nor are delayed
        messages not delivered yet (as in Pulsar)."""
        if self.cursor.mark_delete_position >= self.ledger.previous_position(position):
            return True
        if not scan:
            return False
        first = self.replay.first()
        if first is not None and first < position:
            return False
        return not any(p < position for c in self.consumers for p in c.pending_acks)

    # --------------------------------------------------------- read-ahead

    def rewind(self) -> None:
        self._queues.clear()
        super().rewind()

    def cursor_reset(self) -> None:
        self._queues.clear()
        self._hash_of.clear()
        self._joined.clear()
        super().cursor_reset()

    async def close(self) -> None:
        await super().close()
        self._queues.clear()
        self._hash_of.clear()

    # ------------------------------------------------------------ the loop

    def _consumers_with_permits(self) -> int:
        return sum(
            (min(c.permits, c.room()) if c.max_unacked else c.permits)
            for c in self.consumers
            if c.permits > 0 and c.is_writable and not c.blocked
        )

    def _dispatch(self, entries: deque[Entry]) -> int:
        # The base loop's buffer is never filled here (see _round); kept for
        # the interface.
        keyed = self._keyed(list(entries))
        entries.clear()
        return self._dispatch_keyed(keyed)

    async def _round(self) -> bool:
        if self._joined:
            # Acks release joiners as they come; this catches a mark-delete
            # moved some other way (a skip, an expiry).
            self._release_joined(scan=False)
        permits = self._within_dispatch_rate(self._within_unacked(self._consumers_with_permits()))
        if permits <= 0:
            return False
        limit = min(permits, self.max_read_batch_size)
        if self.delayed is not None and self.delayed:
            # Due delayed messages go before new ones (SEMANTICS 8.1).
            self.replay.add_all(self.delayed.pop_due(limit))
            self._schedule_delayed()
        progress = False
        if self.replay:
            is_deleted = self.cursor.is_deleted
            positions = [p for p in self.replay.take(limit) if not is_deleted(p)]
            if positions:
                epoch = self._read_epoch
                entries = await self.ledger.read_positions(positions)
                if epoch != self._read_epoch:
                    return True
                replayed = self._keyed(e for e in entries if not is_deleted(e.position))
                # Back among the held ones by position: per key, oldest first.
                self._regroup(sorted(replayed))
            progress = True
        fresh: list[KeyedEntry] = []
        if not self.replay and self.held < self.look_ahead and self.cursor.has_more_entries():
            epoch = self._read_epoch
            entries = await self.cursor.read_entries(limit)
            if epoch != self._read_epoch:
                return True
            fresh = self._keyed(entries, hold_delayed=self.delayed is not None)
            progress = progress or bool(entries)
        dispatched = self._dispatch_keyed(fresh)
        return progress or dispatched > 0

    def _keyed(self, entries: Iterable[Entry], *, hold_delayed: bool = False) -> list[KeyedEntry]:
        """Attach each entry's key hash: the one kept from its first read when
        it has been out before, else parsed now (once)."""
        keyed: list[KeyedEntry] = []
        known = self._hash_of
        for entry in entries:
            position = entry.position
            key_hash = known.get(position)
            if key_hash is None:
                key_hash, deliver_at = key_hash_and_deliver_at(entry.data)
                if hold_delayed and deliver_at and self._hold(position, key_hash, deliver_at):
                    continue
            keyed.append(KeyedEntry(position, key_hash, entry))
        return keyed

    def _hold(self, position: Position, key_hash: int, deliver_at: int) -> bool:
        delayed = self.delayed
        assert delayed is not None
        if not delayed.add(position, deliver_at):
            return False
        self._hash_of[position] = key_hash
        if self._delayed_timer is None or deliver_at < self._delayed_due_at:
            self._set_delayed_timer(deliver_at)
        return True

    def _dispatch_keyed(self, fresh: list[KeyedEntry]) -> int:
        """Queue `fresh` behind the held entries of each key's owner, then let
        every consumer that can take entries take from the head of its queue."""
        queues = self._queues
        if fresh:
            _queue_by_owner(queues, fresh, self.selector.select)
        blocked: set[int] = set()
        if self.replay:
            # Redeliveries not read yet go first: their keys wait for them.
            hash_of = self._hash_of
            blocked = {hash_of[p] for p in self.replay if p in hash_of}
        dispatched = 0
        room = self._room
        for consumer in self.consumers:
            queue = queues.get(consumer)
            if queue and consumer.permits > 0 and consumer.is_writable and not consumer.blocked:
                budget = consumer.permits
                if consumer.max_unacked:
                    budget = min(budget, consumer.room())
                if room is not None:
                    if room <= 0:
                        break  # the subscription's unacked limit is reached
                    budget = min(budget, room)
                chosen = self._take(consumer, queue, blocked, budget)
                if chosen:
                    self._send(consumer, chosen)
                    dispatched += len(chosen)
                    if room is not None:
                        room -= sum(e.num_messages for e in chosen)
        return dispatched

    def _take(
        self, consumer: Consumer, queue: deque[KeyedEntry], blocked: set[int], budget: int
    ) -> list[Entry]:
        """Entries from the head of `consumer`'s queue while `budget` (its
        permits, within the unacked limits) lasts (SEM-2.2: the next entry goes
        while it is positive) and before its join mark; keys in `blocked`
        stay, and so do their later entries."""
        join = self._joined.get(consumer) if self._joined else None
        mark = join.mark if join is not None else None
        hash_of = self._hash_of
        chosen: list[Entry] = []
        if not blocked:
            while queue and budget > 0:
                item = queue[0]
                if mark is not None and item.position >= mark:
                    break
                queue.popleft()
                entry = item.entry
                chosen.append(entry)
                budget -= entry.num_messages
                hash_of[item.position] = item.key_hash
            return chosen
        kept: deque[KeyedEntry] = deque()
        while queue:
            item = queue.popleft()
            if budget <= 0 or (mark is not None and item.position >= mark):
                kept.append(item)
                kept.extend(queue)
                queue.clear()
                break
            if item.key_hash in blocked:
                kept.append(item)
                continue
            entry = item.entry
            chosen.append(entry)
            budget -= entry.num_messages
            hash_of[item.position] = item.key_hash
        queue.extend(kept)
        return chosen


def _queue_by_owner(
    queues: dict[Consumer | None, deque[KeyedEntry]],
    items: Iterable[KeyedEntry],
    select: Callable[[int], Consumer | None],
) -> None:
    """Append each entry to the queue of the consumer its key hash selects."""
    for item in items:
        owner = select(item.key_hash)
        queue = queues.get(owner)
        if queue is None:
            queues[owner] = deque((item,))
        else:
            queue.append(item)
