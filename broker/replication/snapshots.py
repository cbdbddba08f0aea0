"""Replicated subscriptions (issue 45.4, Pulsar's PIP-33): one topic's
controller, beside its replicators.

A durable subscription is replicated when a consumer subscribed with
`replicate_subscription_state` (features/markers.py keeps the flag with the
cursor). While the topic has replicators and at least one replicated
subscription, every `frequency` the controller writes a snapshot request
marker into the topic (when something was stored since the last one). The
replicators carry it to each remote; the remote's controller, on storing
it, answers with a response marker naming its own topic's last position,
which replicates back (only to the asking cluster). Where the last response
lands here is the snapshot's local position: every entry the remote had at
its answer is here before it (the remote's own entries came through one
ordered stream ahead of the response; the ones from here were here first).
So a subscription acknowledged up to that local position may be
acknowledged up to the remote's position there.

When a replicated subscription's mark-delete position passes a snapshot's
local position, the controller writes an update marker (the subscription
and the remotes' positions) that replicates to them; a remote, on storing
it, moves the subscription's mark-delete position there (creating the
subscription if needed). A consumer that moves to the other cluster then
gets what was not acknowledged here, plus at most what arrived since the
snapshot.

Limits: snapshots are kept in memory (a restart starts again, within one
period), at most `max_cached` per topic (Pulsar keeps that many per
subscription, from snapshot markers the subscription read): beyond it the
oldest go, but never a subscription's next one.

With two remotes or more a snapshot takes two rounds of requests, as
Pulsar's: a message from a third cluster may reach a remote before its copy
reaches here, so the remotes' positions come from the first round and the
local position from where the last answer of the second lands.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import structlog

from magnetar.broker.errors import BrokerServiceError, SubscriptionNotFoundError
from magnetar.broker.features.dedup import CURSOR_NAME as DEDUP_CURSOR
from magnetar.broker.features.keywindow import CURSOR_NAME as KEY_WINDOW_CURSOR
from magnetar.broker.features.markers import (
    Marker,
    MarkerError,
    SnapshotRequest,
    SnapshotResponse,
    SubscriptionUpdate,
    is_replicated,
    mark_replicated,
    marker_entry,
    parse_entry,
)
from magnetar.broker.features.replicated import is_replication_name
from magnetar.broker.storage.api import EARLIEST, ManagedCursor, Position, StorageError
from magnetar.broker.topics.base import StoredTopic
from magnetar.proto.errors import ProtocolError

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class SnapshotSettings:
    """Pulsar's replicatedSubscriptionsSnapshot* broker settings."""

    frequency_s: float = 1.0
    timeout_s: float = 30.0
    max_cached: int = 10


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Acknowledged here up to `local` means acknowledged up to each
    remote's position there."""

    snapshot_id: str
    local: Position
    remotes: Mapping[str, Position]


@dataclass(slots=True)
class _Pending:
    snapshot_id: str
    started: float
    remotes: frozenset[str]
    responses: dict[str, Position] = field(default_factory=dict)
    # With two remotes or more: the first round's answers, while the
    # second round runs.
    first_round: dict[str, Position] | None = None


class ReplicatedSubscriptions:
    """One topic's snapshots and updates; owned by the topic's Replicators
    entry (started with the first replicator, stopped with the last)."""

    def __init__(
        self,
        topic: StoredTopic,
        local_cluster: str,
        settings: SnapshotSettings,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.topic = topic
        self.local_cluster = local_cluster
        self.settings = settings
        self._clock = clock
        # The remote clusters the topic replicates to (the replicators').
        self.remotes: frozenset[str] = frozenset()
        self._pending: _Pending | None = None
        # Completed snapshots, oldest first.
        self.snapshots: list[Snapshot] = []
        # Subscription -> the local position of the last snapshot it sent.
        self._sent: dict[str, Position] = {}
        # Markers stored on the topic since it loaded (written here or by a
        # replicator), and how many messages besides them were stored when
        # the last request was written: no request while none came since
        # (markers alone would keep the clusters asking each other).
        self._markers = 0
        self._messages_at_request: int | None = None
        self._task: asyncio.Task[None] | None = None
        # Updates from remotes being applied (they open subscriptions).
        self._applying: set[asyncio.Task[None]] = set()
        self._log = log.bind(topic=topic.name)

    def start(self) -> None:
        """Listen for the markers replicators store; snapshot periodically."""
        self.topic.marker_listener = self.on_marker
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"replicated subscriptions {self.topic.name}"
        )

    async def stop(self) -> None:
        """Stop listening, cancel the loop and pending updates; wait for
        them. Idempotent."""
        if self.topic.marker_listener == self.on_marker:
            self.topic.marker_listener = None
        tasks = [t for t in (self._task, *self._applying) if t is not None]
        self._task = None
        self._applying.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # ------------------------------------------------------------ the loop

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.settings.frequency_s)
            try:
                self.tick()
            except StorageError as exc:
                self._log.debug("replicated subscriptions: storage unavailable", error=str(exc))
            except Exception:  # a bug: logged, and the next period tries again
                self._log.exception("replicated subscriptions period failed")

    def replicated_cursors(self) -> list[ManagedCursor]:
        """The topic's replicated subscriptions, open or not."""
        return [
            c
            for c in self.topic.ledger.cursors
            if c.is_durable
            and c.name not in (DEDUP_CURSOR, KEY_WINDOW_CURSOR)
            and not is_replication_name(c.name)
            and is_replicated(c)
        ]

    def tick(self) -> None:
        """One period: time out a pending snapshot, start one, send the
        updates of subscriptions that passed a snapshot."""
        cursors = self.replicated_cursors()
        if not cursors or not self.remotes or self.topic.is_closed:
            return
        now = self._clock()
        pending = self._pending
        if pending is not None and now - pending.started > self.settings.timeout_s:
            # Debug: while a remote is away every topic's snapshots time
            # out, and its replicator already says so once per outage.
            self._log.debug(
                "replicated subscriptions snapshot timed out",
                snapshot_id=pending.snapshot_id,
                missing=sorted(pending.remotes - set(pending.responses)),
            )
            self._pending = pending = None
        asked = self._messages_at_request
        if pending is None and (asked is None or self._messages() > asked):
            self._request(now)
        self._sent = {c.name: self._sent[c.name] for c in cursors if c.name in self._sent}
        for cursor in cursors:
            self._update(cursor)
        self._prune([c.mark_delete_position for c in cursors])

    def _request(self, now: float) -> None:
        snapshot_id = uuid.uuid4().hex
        remotes = self.remotes
        self._pending = _Pending(snapshot_id, now, remotes)
        self._messages_at_request = self._messages()
        self._write(SnapshotRequest(snapshot_id, self.local_cluster), sorted(remotes))
        self._log.debug("replicated subscriptions snapshot requested", snapshot_id=snapshot_id)

    @property
    def idle(self) -> bool:
        """Whether the next periods write nothing until something is stored:
        no snapshot pending, no message since the last request, no update
        due, none from a remote being applied."""
        if self._applying:
            return False
        cursors = self.replicated_cursors()
        if not cursors or not self.remotes or self.topic.is_closed:
            return True
        asked = self._messages_at_request
        return (
            self._pending is None
            and asked is not None
            and self._messages() <= asked
            and all(self._update_due(c) is None for c in cursors)
        )

    def _update_due(self, cursor: ManagedCursor) -> tuple[Snapshot, list[str]] | None:
        """The newest snapshot the subscription passed whose update it did
        not send yet, and the remotes to send it to."""
        mark_delete = cursor.mark_delete_position
        passed = [s for s in self.snapshots if s.local <= mark_delete]
        if not passed:
            return None
        snapshot = passed[-1]
        sent = self._sent.get(cursor.name)
        if sent is not None and sent >= snapshot.local:
            return None
        targets = sorted(set(snapshot.remotes) & self.remotes)
        return (snapshot, targets) if targets else None

    def _update(self, cursor: ManagedCursor) -> None:
        due = self._update_due(cursor)
        if due is None:
            return
        snapshot, targets = due
        positions = {c: snapshot.remotes[c] for c in targets}
        self._write(SubscriptionUpdate(cursor.name, positions), targets)
        self._sent[cursor.name] = snapshot.local
        self._log.debug(
            "replicated subscription update sent",
            subscription=cursor.name,
            snapshot_id=snapshot.snapshot_id,
            positions={c: str(p) for c, p in positions.items()},
        )

    def _prune(self, mark_deletes: list[Position]) -> None:
        """Keep the newest snapshot every subscription passed and the ones
        after it, at most `max_cached`: the oldest go first, except the
        newest one and each subscription's next one (the first after its
        mark-delete position), so a subscription far behind still moves
        on the remotes whenever it passes the one kept for it."""
        snapshots = self.snapshots
        passed = [i for i, s in enumerate(snapshots) if s.local <= min(mark_deletes)]
        if len(passed) > 1:
            del snapshots[: passed[-1]]
        excess = len(snapshots) - self.settings.max_cached
        if excess <= 0:
            return
        kept = {len(snapshots) - 1}
        for mark_delete in mark_deletes:
            following = [i for i, s in enumerate(snapshots) if s.local > mark_delete]
            if following:
                kept.add(following[0])
        dropped = [i for i in range(len(snapshots)) if i not in kept][:excess]
        for i in reversed(dropped):
            del snapshots[i]

    def _messages(self) -> int:
        """Messages (not markers) the topic stored since it loaded."""
        return self.topic.published.messages - self._markers

    def _write(self, marker: Marker, replicate_to: list[str]) -> None:
        self._markers += 1
        self.topic.marker_horizon.marker_stored()
        written = self.topic.append(marker_entry(marker, replicate_to), 1)
        written.add_done_callback(self._written)

    def _written(self, written: asyncio.Future[Position]) -> None:
        if written.cancelled():
            return
        exc = written.exception()
        if exc is not None:
            self._log.warning("marker not written", error=str(exc) or type(exc).__name__)

    # ------------------------------------------------------------ markers stored

    def on_marker(self, position: Position, data: bytes) -> None:
        """A remote cluster's replicator stored a marker entry at `position`."""
        self._markers += 1
        try:
            metadata, marker = parse_entry(data)
        except (MarkerError, ProtocolError) as exc:
            self._log.warning("undecodable marker ignored", entry=str(position), error=str(exc))
            return
        source = metadata.replicated_from
        if isinstance(marker, SnapshotRequest):
            # Answered to the asking cluster only: our last position now.
            answer = SnapshotResponse(
                marker.snapshot_id, self.local_cluster, self.topic.ledger.last_confirmed_position
            )
            self._write(answer, [marker.source_cluster or source])
        elif isinstance(marker, SnapshotResponse):
            self._response(position, marker)
        elif isinstance(marker, SubscriptionUpdate):
            target = marker.positions.get(self.local_cluster)
            if target is not None:
                task = asyncio.get_running_loop().create_task(
                    self._apply(marker.subscription, target)
                )
                self._applying.add(task)
                task.add_done_callback(self._applying.discard)

    def _response(self, position: Position, response: SnapshotResponse) -> None:
        pending = self._pending
        if pending is None or pending.snapshot_id != response.snapshot_id:
            return  # timed out, or another broker's (before a topic move)
        if response.cluster not in pending.remotes:
            return
        pending.responses[response.cluster] = response.position
        if set(pending.responses) != pending.remotes:
            return
        if len(pending.remotes) > 1 and pending.first_round is None:
            # A third cluster's message may reach a remote before its own
            # copy reaches here: the remotes' positions come from this
            # round, the local position from the end of a second one (every
            # such message is here before the answers to it).
            pending.first_round, pending.responses = pending.responses, {}
            request = SnapshotRequest(pending.snapshot_id, self.local_cluster)
            self._write(request, sorted(pending.remotes))
            return
        self._pending = None
        remotes = pending.first_round if pending.first_round is not None else pending.responses
        snapshot = Snapshot(pending.snapshot_id, position, dict(remotes))
        self.snapshots.append(snapshot)
        self._log.debug(
            "replicated subscriptions snapshot complete",
            snapshot_id=snapshot.snapshot_id,
            local=str(position),
            remotes={c: str(p) for c, p in snapshot.remotes.items()},
        )

    async def _apply(self, name: str, position: Position) -> None:
        """Another cluster's replicated subscription moved: this cluster's
        follows (created when missing, at the earliest entry)."""
        topic = self.topic
        try:
            try:
                sub = await topic.get_subscription(name)
            except SubscriptionNotFoundError:
                sub = await topic.create_subscription(name, EARLIEST)
            mark_replicated(sub.cursor)
            before = sub.cursor.mark_delete_position
            sub.acknowledge_up_to(position)
        except (BrokerServiceError, StorageError) as exc:
            self._log.warning(
                "replicated subscription update not applied", subscription=name, error=str(exc)
            )
            return
        after = sub.cursor.mark_delete_position
        if after != before:
            self._log.info(
                "replicated subscription moved",
                subscription=name,
                mark_delete=str(after),
            )
