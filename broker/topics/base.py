"""The Topic and Subscription interfaces the connection layer and the admin
API are written against (Pulsar has the same two).

A persistent topic implements them over a managed ledger; a non-persistent
topic (dispatch or drop) implements them without storage, and nothing
above this seam changes. What only a topic over a managed ledger has (its
ledger, subscriptions that outlive their consumers, backlog operations, TTL
and quotas) is StoredTopic / StoredSubscription, reached through
is_persistent(): admin, expiry and metrics name no concrete class.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol, TypeGuard

from magnetar.broker.compaction.state import TopicCompaction
from magnetar.broker.counters import RateCounter
from magnetar.broker.dispatchers.consumer import Consumer, KeySharedPolicy
from magnetar.broker.endpoint import ClientConnection
from magnetar.broker.features.dedup import MessageDeduplication
from magnetar.broker.features.keywindow import KeyWindowIndex, KeyWindowPolicy
from magnetar.broker.features.markers import MarkerHorizon
from magnetar.broker.policies.backlog_quota import QuotaState
from magnetar.broker.policies.rates import DispatchRate, PublishRate, PublishRateLimiter
from magnetar.broker.policies.subscribe_rate import SubscribeRate, SubscribeRateLimiter
from magnetar.broker.policies.subscription_rates import SubscriptionDispatchRates
from magnetar.broker.storage.api import InitialPosition, ManagedCursor, ManagedLedger, Position
from magnetar.broker.topics.publish_path import MarkerListener, Producer
from magnetar.broker.topics.topic_producers import PublishLimits
from magnetar.proto.naming import TopicName


class LastMessageId(NamedTuple):
    """GET_LAST_MESSAGE_ID's answer: the newest entry (and its last batch
    index, -1 when not a batch) and the subscription's mark-delete position."""

    position: Position
    batch_index: int
    mark_delete: Position


@dataclass(frozen=True, slots=True)
class SubscriptionStats:
    name: str
    type_name: str
    msg_backlog: int
    is_durable: bool
    consumers: int
    # Messages a non-persistent subscription dropped (no consumer could take them).
    msg_dropped: int = 0


@dataclass(frozen=True, slots=True)
class SubscribeOptions:
    """One SUBSCRIBE, decoded: what a topic needs to attach a consumer."""

    consumer_id: int
    subscription: str
    sub_type: int
    consumer_name: str
    priority_level: int = 0
    initial_position: InitialPosition = InitialPosition.LATEST
    durable: bool = True
    # Non-durable (reader) subscriptions start here; None: latest.
    start_position: Position | None = None
    start_inclusive: bool = False
    epoch: int | None = None
    # Key_Shared consumers: KeySharedMeta (mode, sticky ranges, out-of-order).
    key_shared: KeySharedPolicy | None = None
    # Read the compacted view up to the compaction horizon (Exclusive, Failover).
    read_compacted: bool = False
    # The subscription's state replicates to the topic's other clusters
    # (issue 45.4); durable subscriptions only.
    replicate_subscription_state: bool = False


class Subscription(Protocol):
    # Bumped when a consumer leaves: the inactivity sweep (service/inactivity.py)
    # restarts the subscription's idle time when it changed.
    activity: int

    @property
    def name(self) -> str: ...

    @property
    def topic_name(self) -> str: ...

    @property
    def is_durable(self) -> bool: ...

    @property
    def consumers(self) -> Sequence[Consumer]: ...

    @property
    def dispatched(self) -> RateCounter:
        """Messages and bytes sent to this subscription's consumers."""
        ...

    @property
    def redelivered(self) -> RateCounter:
        """Messages among them sent again (msgRateRedeliver)."""
        ...

    @property
    def unacked_messages(self) -> int: ...

    @property
    def delayed_messages(self) -> int: ...

    @property
    def delayed_total(self) -> int: ...

    def remove_consumer(self, consumer: Consumer) -> None:
        """Detach a consumer; its unacked messages go to the others (SEM-3.8)."""
        ...

    def consumer_flow(self, consumer: Consumer, permits: int) -> None: ...

    def consumers_writable(self) -> None:
        """A connection's socket drained; dispatch may progress."""
        ...

    def acknowledge_individual(
        self,
        consumer: Consumer,
        positions: Sequence[Position],
        ack_sets: Sequence[list[int] | None],
    ) -> None: ...

    def acknowledge_cumulative(
        self, consumer: Consumer, position: Position, ack_set: list[int] | None = None
    ) -> None: ...

    def redeliver(self, consumer: Consumer, positions: Sequence[Position] | None) -> None: ...

    async def reset_cursor(self, target: Position) -> None: ...

    async def reset_cursor_to_time(self, timestamp_ms: int) -> None: ...

    async def last_message_id(self) -> LastMessageId: ...

    def stats(self) -> SubscriptionStats: ...

    async def close(self, *, notify_clients: bool = False) -> None: ...


class Topic(Protocol):
    # Bumped when a producer leaves or a subscription goes: the inactivity
    # sweep (service/inactivity.py) restarts the topic's idle time when it changed.
    activity: int

    @property
    def name(self) -> str: ...

    @property
    def is_persistent(self) -> bool:
        """True when the topic is a StoredTopic (see is_persistent())."""
        ...

    @property
    def is_closed(self) -> bool: ...

    @property
    def topic_name(self) -> TopicName: ...

    @property
    def partition_index(self) -> int: ...

    @property
    def producers(self) -> Mapping[str, Producer]: ...

    @property
    def subscriptions(self) -> Mapping[str, Subscription]: ...

    @property
    def published(self) -> RateCounter:
        """Messages and bytes accepted for publishing (msgIn)."""
        ...

    @property
    def dispatched(self) -> RateCounter:
        """Messages and bytes sent to consumers of any subscription (msgOut)."""
        ...

    def append(self, data: bytes, num_messages: int) -> asyncio.Future[Position]:
        """Store one entry; the future resolves once it is durable."""
        ...

    def add_producer(
        self,
        cnx: ClientConnection,
        producer_id: int,
        name: str,
        *,
        access_mode: int,
        user_provided_name: bool,
        epoch: int = 0,
    ) -> Producer: ...

    async def wait_for_exclusive_access(self, on_queued: Callable[[], None]) -> None: ...

    @property
    def deduplication(self) -> MessageDeduplication | None: ...

    def last_sequence_id(self, producer_name: str) -> int: ...

    @property
    def replicated_dedup(self) -> MessageDeduplication | None: ...

    async def accept_replicator(self, name: str) -> None:
        """Before a remote cluster's replicator `name` (`pulsar.repl.<cluster>`)
        publishes: its sequence ids are deduplicated from here on whatever
        the deduplication policy, and its earlier connection's appends still
        in flight have landed (issue 45)."""
        ...

    async def set_deduplication(self, enabled: bool) -> None: ...

    @property
    def key_window(self) -> KeyWindowIndex | None: ...

    async def set_key_window(self, policy: KeyWindowPolicy | None) -> None: ...

    @property
    def publish_rate(self) -> PublishRateLimiter | None: ...

    def set_publish_rate(self, rate: PublishRate | None) -> None: ...

    @property
    def publish_limits(self) -> PublishLimits | None: ...

    def set_publish_limits(self, limits: PublishLimits) -> None: ...

    def set_delayed_delivery(self, active: bool) -> None:
        """The delayedDelivery policy's switch; no-op where nothing is held."""
        ...

    def set_auto_subscription_creation(self, allowed: bool) -> None:
        """Whether a SUBSCRIBE may create a subscription; no-op where every
        subscription lives only while it has consumers."""
        ...

    def set_unacked_limits(self, per_consumer: int, per_subscription: int) -> None:
        """maxUnackedMessagesOnConsumer / OnSubscription (0: none) for its
        Shared and Key_Shared dispatchers; no-op where nothing is acked."""
        ...

    def set_dispatch_rate(self, rate: DispatchRate | None) -> None: ...

    def set_subscription_dispatch_rates(self, rates: SubscriptionDispatchRates) -> None:
        """Apply subscriptionDispatchRate (and subscriptions' own rates)."""
        ...

    @property
    def subscribe_rate(self) -> SubscribeRateLimiter | None:
        """Set while a subscribeRate policy limits SUBSCRIBEs to the topic."""
        ...

    def set_subscribe_rate(self, rate: SubscribeRate | None) -> None:
        """Apply (None: remove) subscribeRate; no-op where Pulsar has no
        limiter (non-persistent topics)."""
        ...

    def set_dedup_snapshot_interval(self, seconds: int) -> None:
        """Time-based dedup snapshots (0: none); no-op where nothing is stored."""
        ...

    def remove_producer(self, producer: Producer) -> None: ...

    async def subscribe(
        self, cnx: ClientConnection, options: SubscribeOptions
    ) -> tuple[Consumer, Subscription]: ...

    async def unsubscribe(self, subscription: Subscription, consumer: Consumer) -> None: ...

    async def last_message_id(self) -> tuple[Position, int]: ...

    def set_compaction_threshold(self, threshold_bytes: int) -> None:
        """The automatic compaction trigger (0: off); no-op where nothing compacts."""
        ...

    def terminate(self, last: Position | None = None) -> Position:
        """Stop publishing for good after `last` (None: the newest entry) and
        return it; NotAllowedError where a topic cannot be terminated."""
        ...

    async def close(self, *, notify_clients: bool = True) -> None: ...


class StoredSubscription(Subscription, Protocol):
    """A subscription over a managed cursor: the backlog operations of the
    admin API and of expiry."""

    @property
    def ledger(self) -> ManagedLedger: ...

    @property
    def cursor(self) -> ManagedCursor: ...

    def skip_entries(self, count: int) -> int:
        """Acknowledge the next `count` unacknowledged entries; how many were."""
        ...

    def clear_backlog(self) -> None: ...

    def acknowledge_up_to(self, position: Position) -> None:
        """Acknowledge everything up to `position` (at most the last entry)
        on the subscription's behalf, as a cumulative ack would."""
        ...

    async def expire_messages(self, published_before_ms: int) -> None:
        """Acknowledge every entry published before `published_before_ms`."""
        ...

    @property
    def blocked_on_unacked(self) -> bool:
        """At its maxUnackedMessagesOnSubscription (dispatch held)."""
        ...


class StoredTopic(Topic, Protocol):
    """A topic over a managed ledger: its storage, the durable subscriptions
    stored in it (open or not), message TTL, backlog quotas and compaction."""

    # The namespace's message TTL in seconds (0: none); set by policies.
    message_ttl_s: int
    # Told of each marker entry a remote cluster's replicator stored
    # (replicated subscriptions, issue 45.4); set by the replication layer.
    marker_listener: MarkerListener | None
    # How far its entries may be markers; the writers of markers move it.
    marker_horizon: MarkerHorizon

    @property
    def ledger(self) -> ManagedLedger: ...

    @property
    def quota(self) -> QuotaState: ...

    @property
    def compaction(self) -> TopicCompaction: ...

    @property
    def terminated_at(self) -> Position | None:
        """Where a terminated topic stopped (None: not terminated)."""
        ...

    @property
    def storage_writes(self) -> RateCounter:
        """Entries (as messages) and bytes storage wrote (storage write rate)."""
        ...

    @property
    def duplicates(self) -> int:
        """SENDs answered as duplicates since the topic was loaded."""
        ...

    def idle_cursors(self) -> list[ManagedCursor]:
        """Durable subscriptions stored but not open."""
        ...

    def subscription_names(self) -> list[str]:
        """Open subscriptions and stored durable ones, sorted."""
        ...

    async def get_subscription(self, name: str) -> StoredSubscription:
        """An open subscription, opening a stored durable one;
        SubscriptionNotFoundError otherwise."""
        ...

    async def create_subscription(self, name: str, start: Position) -> StoredSubscription: ...

    async def delete_subscription(self, name: str) -> None: ...

    async def evict_backlog(self, now_s: float) -> None: ...

    def disconnect_producers_over_quota(self) -> int: ...


def is_persistent(topic: Topic) -> TypeGuard[StoredTopic]:
    """Narrow a topic to StoredTopic by its own word (Pulsar's admin casts to
    PersistentTopic instead); nothing above topics/ checks a concrete class."""
    return topic.is_persistent
