"""One topic's replicator to one remote cluster (issue 45, Pulsar's
PersistentReplicator).

It reads the topic through the durable cursor `pulsar.repl.<remote>` and
publishes each entry on the remote, as the producer `pulsar.repl.<local>`,
with its metadata kept (key, ordering key, properties, event and publish
time, schema version) and `replicated_from` set to the local cluster; the
sequence id is the entry's position (features/replicated.py), which the
remote deduplicates. An entry is acknowledged on the cursor when the
remote's receipt comes back, so the cursor's backlog is what the remote
still lacks, and retention keeps it.

Skipped, and acknowledged at once: entries that came from another cluster
(never sent back: active-active without loops), entries whose
`replicate_to` leaves this remote out (`disable_replication` sends
`["__local__"]`), and entries the remote already reported having.

Failures close the producer; the replicator waits (doubling up to a limit),
opens a new one and resends from the cursor's first unacknowledged entry.
One warning per outage, one line when it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import time
from collections.abc import Awaitable, Callable

import structlog

from magnetar.broker.counters import RateCounter, rate_stats
from magnetar.broker.features.replicated import cursor_name, producer_name, sequence_id
from magnetar.broker.policies.rates import DispatchRateLimiter
from magnetar.broker.replication.metrics import ReplicationMetrics
from magnetar.broker.replication.remote import RemoteError, RemoteProducer, Sent
from magnetar.broker.schemas.types import SchemaVersion, to_wire, version_from_bytes
from magnetar.broker.storage.api import (
    CursorClosed,
    Entry,
    InitialPosition,
    ManagedCursor,
    ManagedLedgerClosed,
    Position,
    StorageError,
)
from magnetar.broker.topics.base import StoredTopic
from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.errors import ProtocolError
from magnetar.proto.frames import REPLICA_SCAN_COMPILED, Payload
from magnetar.proto.naming import TopicName
from magnetar.proto.replica_scan import scan_entry

log = structlog.get_logger(__name__)


def _iso(ms: int) -> str:
    """Pulsar's connectedSince shape; "" for never."""
    if ms <= 0:
        return ""
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).isoformat()


Opener = Callable[[], Awaitable[RemoteProducer]]
# The local schema registry's version of a topic (None: not there).
SchemaLookup = Callable[[TopicName, int], Awaitable[SchemaVersion | None]]

# Entries read and sent per turn of the event loop, and sends awaiting the
# remote's receipts (Pulsar's replicationProducerQueueSize is 1,000). One
# loop serves the topic's producers and its replicator: with 500 a turn the
# replicator fell behind a producer that sent as fast as it could, and with
# 1,000 in flight it waited for receipts (which a loaded broker reads a loop
# turn late) more than it sent. bench georep, unbatched, reaching B against
# A's produce rate: 0.50-0.59 with 500 / 1,000; 0.86-0.98 with 2,000 / 5,000;
# 0.98-0.99 with 2,000 / 10,000.
_READ_BATCH = 2000
_MAX_PENDING = 10_000
_MIN_BACKOFF = 0.1
_MAX_BACKOFF = 30.0


class Replicator:
    def __init__(
        self,
        topic: StoredTopic,
        local_cluster: str,
        remote_cluster: str,
        opener: Opener,
        metrics: ReplicationMetrics,
        schemas: SchemaLookup | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.topic = topic
        self.local_cluster = local_cluster
        self.remote_cluster = remote_cluster
        self._opener = opener
        self._metrics = metrics
        self._schemas = schemas
        self._cursor: ManagedCursor | None = None
        self._task: asyncio.Task[None] | None = None
        self._clock = clock
        self.connected: bool = False
        # Where the producer is connected ("" while not), and since when (ms).
        self.outbound = ""
        self.outbound_since_ms = 0
        # Messages and bytes the remote acknowledged since the topic loaded;
        # rates from the periodic stats update (update_rates).
        self.out: RateCounter = RateCounter()
        # replicatorDispatchRate: what may go to the remote per period.
        self.limiter = DispatchRateLimiter()
        # Publish times (ms) of the entries sent and not yet acknowledged,
        # oldest first; and when the remote last had everything (seconds):
        # the replication delay.
        self._unacknowledged: dict[Position, int] = {}
        self._caught_up_at = clock()
        # The reason of the outage under way (None: none), logged once.
        self._outage: str | None = None
        self._log = log.bind(topic=topic.name, remote_cluster=remote_cluster)
        # This remote's series, looked up once (a lookup per entry cost more
        # than the rest of a receipt's work).
        self._messages_out = metrics.messages_out.labels(remote_cluster)
        self._bytes_out = metrics.bytes_out.labels(remote_cluster)
        self._local_name = local_cluster.encode()

    @property
    def cursor(self) -> ManagedCursor:
        assert self._cursor is not None, "the replicator is not started"
        return self._cursor

    async def start(self) -> None:
        """Open (or create, at the newest entry) the replication cursor and
        start replicating in the background."""
        cursor = await self.topic.ledger.open_cursor(
            cursor_name(self.remote_cluster), InitialPosition.LATEST
        )
        cursor.set_active()  # tailing reads come from the entry cache
        self._cursor = cursor
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"replicator {self.topic.name} -> {self.remote_cluster}"
        )
        self._log.info("replicator started", backlog=cursor.backlog_messages)

    async def stop(self) -> None:
        """Cancel the background task and wait for it; the cursor stays (the
        topic persists it when it closes). Idempotent."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            self._log.info("replicator stopped")
        if self._cursor is not None:
            self._cursor.set_inactive()

    async def remove(self) -> None:
        """Stop, and delete the cursor: replication to the remote ended."""
        await self.stop()
        with contextlib.suppress(StorageError):
            await self.topic.ledger.delete_cursor(cursor_name(self.remote_cluster))

    @property
    def backlog(self) -> int:
        """Messages the remote does not have yet."""
        return 0 if self._cursor is None else self._cursor.backlog_messages

    @property
    def delay_seconds(self) -> float:
        """How long the oldest message the remote lacks has waited: from its
        publish time once sent, from when the remote last had everything
        while nothing is in flight (an outage), 0 without a backlog."""
        now = self._clock()
        for publish_ms in self._unacknowledged.values():
            return max(0.0, now - publish_ms / 1000)
        if self.backlog == 0:
            self._caught_up_at = now
            return 0.0
        return max(0.0, now - self._caught_up_at)

    @property
    def incoming(self) -> RateCounter:
        """What the remote's replicator stored on this topic (zero while it
        has no producer here)."""
        producer = self.topic.producers.get(producer_name(self.remote_cluster))
        found = None if producer is None else producer.replicated_in
        return found if found is not None else RateCounter()

    def stats(self) -> dict[str, object]:
        """Pulsar's ReplicatorStats fields this replicator keeps."""
        return {
            **rate_stats(self.incoming, "In", totals=False),
            **rate_stats(self.out, "Out"),
            "msgRateExpired": 0.0,
            "replicationBacklog": self.backlog,
            "connected": self.connected,
            "replicationDelayInSeconds": self.delay_seconds,
            "outboundConnection": self.outbound,
            "outboundConnectedSince": _iso(self.outbound_since_ms),
        }

    # ------------------------------------------------------------ the loop

    async def _run(self) -> None:
        delay = _MIN_BACKOFF
        while True:
            producer: RemoteProducer | None = None
            try:
                producer = await self._opener()
                self.connected = True
                self.outbound, self.outbound_since_ms = producer.url, int(self._clock() * 1000)
                self._metrics.connected.labels(self.remote_cluster).inc()
                await self._replicate(producer)
            except (ManagedLedgerClosed, CursorClosed):
                return  # the topic is closing: its owner stops this task
            except Exception as exc:  # the task outlives any failure: it retries
                if self._outage is None:
                    delay = _MIN_BACKOFF  # it worked until now: retry soon
                self._failed(exc)
            finally:
                if self.connected:
                    self.connected, self.outbound = False, ""
                    self._metrics.connected.labels(self.remote_cluster).dec()
                if producer is not None:
                    await producer.close()
            await asyncio.sleep(delay)
            delay = min(delay * 2, _MAX_BACKOFF)

    def _failed(self, exc: Exception) -> None:
        self._metrics.errors.labels(self.remote_cluster).inc()
        reason = str(exc) or type(exc).__name__
        expected = isinstance(exc, RemoteError | OSError | TimeoutError | StorageError)
        if not expected:
            # A bug or a peer speaking nonsense: the traceback, once per outage.
            if self._outage is None:
                self._log.exception("replicator failed unexpectedly; retrying", error=reason)
            self._outage = reason
            return
        if self._outage is None:
            self._log.warning("replication to the remote cluster failed; retrying", error=reason)
        else:
            self._log.debug("replication still failing", error=reason)
        self._outage = reason

    def _healthy(self) -> None:
        """The remote took an entry, or nothing was left to send."""
        if self._outage is not None:
            self._log.info("replication to the remote cluster resumed", after=self._outage)
            self._outage = None

    async def _replicate(self, producer: RemoteProducer) -> None:
        """Send every entry after the cursor's acknowledged ones until the
        producer fails (RemoteError) or the topic closes."""
        cursor = self.cursor
        cursor.rewind()  # resend what was sent without a receipt
        already = producer.last_sequence_id
        failed = producer.failed
        producer.on_stored = self._stored
        # Local schema version -> the remote's, for this producer.
        versions: dict[bytes, bytes] = {}
        while True:
            if not cursor.has_more_entries() and producer.pending == 0:
                self._caught_up_at = self._clock()
                self._healthy()
            allowance = self.limiter.allowance()
            if allowance == 0:  # replicatorDispatchRate spent for this period
                await asyncio.sleep(self.limiter.wait())
                continue
            count = _READ_BATCH if allowance is None else min(_READ_BATCH, allowance)
            read = asyncio.ensure_future(cursor.read_entries_or_wait(count))
            try:
                await asyncio.wait((read, failed), return_when=asyncio.FIRST_COMPLETED)
            finally:
                if not read.done():  # the producer failed, or this task is cancelled
                    read.cancel()
                    await asyncio.gather(read, return_exceptions=True)
            if read.cancelled():
                failed.result()  # raises the producer's failure
            skipped: list[Position] = []
            for entry in read.result():
                self.limiter.consume(entry.num_messages, len(entry.data))
                if not (
                    REPLICA_SCAN_COMPILED and self._forward_plain(producer, entry, already, skipped)
                ):
                    await self._forward(producer, entry, already, versions, skipped)
            self._acknowledge(skipped)
            await producer.drain()
            await producer.wait_for_room(_MAX_PENDING)

    def _forward_plain(
        self, producer: RemoteProducer, entry: Entry, already: int, skipped: list[Position]
    ) -> bool:
        """_forward for an entry of the plain shape, its metadata read and
        rewritten as bytes (proto/replica_scan.py); False when _forward must
        decide (protobuf reads it)."""
        position = entry.position
        sequence = sequence_id(position)
        head = scan_entry(entry.data, self._local_name, sequence)
        if head is None:
            return False
        if head.replicated or sequence <= already:
            skipped.append(position)
        else:
            payload = entry.data[head.payload_start :]
            self._send(producer, entry, sequence, head.metadata, payload, head.publish_time)
        return True

    async def _forward(
        self,
        producer: RemoteProducer,
        entry: Entry,
        already: int,
        versions: dict[bytes, bytes],
        skipped: list[Position],
    ) -> None:
        """Send `entry` to the remote, or add it to `skipped` (not to be sent:
        acknowledged with the rest of the read)."""
        position = entry.position
        try:
            payload = Payload.parse(entry.data, verify_checksum=False)
            metadata = payload.metadata
        except ProtocolError as exc:
            self._log.warning(
                "entry not replicated: bad metadata", entry=str(position), error=str(exc)
            )
            skipped.append(position)
            return
        if metadata.replicated_from or (
            metadata.replicate_to and self.remote_cluster not in metadata.replicate_to
        ):
            skipped.append(position)
            return
        sequence = sequence_id(position)
        if sequence <= already:
            skipped.append(position)  # the remote stored it before a reconnect
            return
        local_version = metadata.schema_version
        if local_version:
            remote_version = versions.get(local_version)
            if remote_version is None:
                remote_version = await self._remote_schema(producer, local_version)
                versions[local_version] = remote_version
            metadata.schema_version = remote_version
        metadata.replicated_from = self.local_cluster
        metadata.sequence_id = sequence
        if metadata.HasField("highest_sequence_id"):
            metadata.highest_sequence_id = sequence
        self._send(producer, entry, sequence, metadata, payload.payload, metadata.publish_time)

    def _send(
        self,
        producer: RemoteProducer,
        entry: Entry,
        sequence: int,
        metadata: pb.MessageMetadata | bytes,
        payload: bytes,
        publish_time: int,
    ) -> None:
        """Queue `entry` on the remote producer with its metadata as rewritten."""
        data = Payload.build(metadata, payload).data
        self._unacknowledged.setdefault(entry.position, publish_time)
        producer.send(sequence, data, Sent(entry.position, entry.num_messages, len(data)))

    async def _remote_schema(self, producer: RemoteProducer, local: bytes) -> bytes:
        """The remote's version of the schema `local` names here: registered
        there first (its number may differ). Without a local registry entry
        the version goes as it is."""
        number = version_from_bytes(local)
        stored = None
        if number is not None and self._schemas is not None:
            stored = await self._schemas(self.topic.topic_name, number)
        if stored is None or stored.schema is None:
            self._log.warning("schema version not found here: sent as it is", version=number)
            return local
        return await producer.schema_version(self.topic.name, to_wire(stored))

    def _stored(self, sends: list[Sent]) -> None:
        """The remote's receipts for `sends` came (one read of its socket)."""
        messages = sum(sent.messages for sent in sends)
        size = sum(sent.size for sent in sends)
        self.out.add(messages, size)
        self._messages_out.inc(messages)
        self._bytes_out.inc(size)
        self._healthy()
        unacknowledged = self._unacknowledged
        for sent in sends:
            unacknowledged.pop(sent.position, None)
        self._acknowledge([sent.position for sent in sends])

    def _acknowledge(self, positions: list[Position]) -> None:
        """Done with these entries on the cursor, in one update: what the
        remote stored, or (once per read) what is not to be sent (in
        active-active, every entry that came from the remote)."""
        cursor = self._cursor
        if positions and cursor is not None:
            with contextlib.suppress(StorageError):
                cursor.delete(positions)
