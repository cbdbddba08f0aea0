"""Producer and consumer configuration: the official client's option names and defaults.

Each option is written once, as a field here. The facades (`magnetar.client`
and `magnetar.client.asyncio`) keep the official client's explicit keywords
and turn them into a configuration with `from_keywords`, which takes the
official values (a schema object, one encryption key, the official policy
objects) and the options beyond the official client (their `**ours`);
tests/unit/client/test_client_options.py fails when a facade's keywords and
these fields part.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from magnetar.client.aio.checks import check_ack_timeout as unacked_validate, check_key_reader
from magnetar.client.aio.crypto import CryptoKeyReader
from magnetar.client.aio.enums import (
    BatchingType,
    CompressionType,
    ConsumerCryptoFailureAction,
    ConsumerType,
    InitialPosition,
    PartitionsRoutingMode,
    ProducerAccessMode,
    RegexSubscriptionMode,
)
from magnetar.client.aio.errors import InvalidConfiguration
from magnetar.client.aio.policies import BatchReceivePolicy, DeadLetterPolicy, KeySharedPolicy
from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.hashes import DEFAULT_HASHING_SCHEME, HashingScheme
from magnetar.proto.ids import MessageId

# message_router(message, num_partitions) -> partition index
MessageRouter = Callable[[Any, int], int]
# message_listener(consumer, message); may return an awaitable (the async API).
MessageListener = Callable[[Any, Any], Any]
# active_consumer_listener(consumer, is_active): Failover / Exclusive activity changes.
ActiveConsumerListener = Callable[[Any, bool], Any]


@dataclass
class ProducerConfiguration:
    """Every producer option with its default (batching on, as in `pulsar.asyncio`
    and Pulsar's Java client; the blocking facade's keyword turns it off)."""

    # Official keyword -> the field it sets, where the two differ.
    KEYWORDS: ClassVar[Mapping[str, str]] = {"encryption_key": "encryption_keys"}
    # Fields no keyword sets.
    INTERNAL: ClassVar[frozenset[str]] = frozenset()

    producer_name: str | None = None
    initial_sequence_id: int | None = None
    send_timeout_millis: int = 30000
    compression_type: CompressionType = CompressionType.NONE
    max_pending_messages: int = 1000
    max_pending_messages_across_partitions: int = 50000
    block_if_queue_full: bool = False
    batching_enabled: bool = True
    batching_max_messages: int = 1000
    batching_max_allowed_size_in_bytes: int = 128 * 1024
    batching_max_publish_delay_ms: int = 10
    chunking_enabled: bool = False
    message_routing_mode: PartitionsRoutingMode = PartitionsRoutingMode.RoundRobinDistribution
    lazy_start_partitioned_producers: bool = False
    properties: Mapping[str, str] = field(default_factory=dict)
    batching_type: BatchingType = BatchingType.Default
    access_mode: ProducerAccessMode = ProducerAccessMode.Shared
    message_router: MessageRouter | None = None
    # What PRODUCER registers (None: bytes, nothing registered).
    schema: pb.Schema | None = None
    # End-to-end encryption: key names and the CryptoKeyReader with their keys.
    encryption_keys: tuple[str, ...] = ()
    crypto_key_reader: CryptoKeyReader | None = None
    # Our additions (keywords the official Python client does not have).
    chunk_max_message_size: int | None = None
    hashing_scheme: HashingScheme = DEFAULT_HASHING_SCHEME

    @classmethod
    def from_keywords(cls, keywords: Mapping[str, Any]) -> ProducerConfiguration:
        """From `create_producer`'s keywords as the official client takes them
        (a schema object, one `encryption_key`, `properties` None) and ours;
        an unknown keyword is a TypeError, as in a call."""
        values = _field_values(cls, keywords)
        values["schema"] = wire_schema(values.get("schema"))
        key = values.pop("encryption_keys", None)
        values["encryption_keys"] = (key,) if key else ()
        values["properties"] = dict(values.get("properties") or {})
        return cls(**values)

    def validate(self) -> None:
        if self.batching_enabled and self.chunking_enabled:
            raise InvalidConfiguration(
                "Batching and chunking of messages can't be enabled together."
            )
        if self.send_timeout_millis < 0:
            raise InvalidConfiguration("send_timeout_millis must be >= 0 (0: no timeout)")
        if self.max_pending_messages < 0:
            raise InvalidConfiguration("max_pending_messages must be >= 0")
        if self.batching_max_publish_delay_ms < 0:
            raise InvalidConfiguration("batching_max_publish_delay_ms must be >= 0")
        if self.chunk_max_message_size is not None and self.chunk_max_message_size < 1:
            raise InvalidConfiguration("chunk_max_message_size must be positive")
        check_key_reader(self.crypto_key_reader)
        if self.encryption_keys and self.crypto_key_reader is None:
            raise InvalidConfiguration("encryption_key needs a crypto_key_reader")
        self.compression_type = CompressionType(self.compression_type)
        self.access_mode = ProducerAccessMode(self.access_mode)
        self.batching_type = BatchingType(self.batching_type)
        self.message_routing_mode = PartitionsRoutingMode(self.message_routing_mode)


@dataclass
class ConsumerConfiguration:
    """Every consumer option of SEM-1 with its default (durations in ms, as the keywords)."""

    KEYWORDS: ClassVar[Mapping[str, str]] = {}
    # Set by the client: a reader's start, its non-durable subscription, the stats period.
    INTERNAL: ClassVar[frozenset[str]] = frozenset(
        {"durable", "start_message_id", "stats_interval_seconds"}
    )
    # create_reader's keywords that name a field differently (the rest are subscribe's).
    READER_KEYWORDS: ClassVar[Mapping[str, str]] = {"reader_name": "consumer_name"}

    consumer_type: ConsumerType = ConsumerType.Exclusive
    receiver_queue_size: int = 1000
    consumer_name: str | None = None
    initial_position: InitialPosition = InitialPosition.Latest
    properties: Mapping[str, str] = field(default_factory=dict)
    max_pending_chunked_message: int = 10
    auto_ack_oldest_chunked_message_on_queue_full: bool = False
    expire_time_of_incomplete_chunked_message_ms: int = 60000
    message_listener: MessageListener | None = None
    max_total_receiver_queue_size_across_partitions: int = 50000
    unacked_messages_timeout_ms: int | None = None
    ack_timeout_tick_time_ms: int = 1000
    ack_group_time_ms: int = 100
    ack_group_max_size: int = 1000
    ack_receipt_enabled: bool = False
    negative_ack_redelivery_delay_ms: int = 60000
    broker_consumer_stats_cache_time_ms: int = 30000
    is_read_compacted: bool = False
    pattern_auto_discovery_period: int = 60
    replicate_subscription_state_enabled: bool = False
    start_message_id_inclusive: bool = False
    batch_receive_policy: BatchReceivePolicy = field(default_factory=BatchReceivePolicy)
    key_shared_policy: KeySharedPolicy | None = None
    # What SUBSCRIBE declares (None: bytes).
    schema: pb.Schema | None = None
    batch_index_ack_enabled: bool = False
    regex_subscription_mode: RegexSubscriptionMode = RegexSubscriptionMode.PersistentOnly
    dead_letter_policy: DeadLetterPolicy | None = None
    crypto_failure_action: ConsumerCryptoFailureAction = ConsumerCryptoFailureAction.FAIL
    # Decrypts end-to-end encrypted messages (None: crypto_failure_action decides).
    crypto_key_reader: CryptoKeyReader | None = None
    # Beyond the official Python client.
    priority_level: int = 0
    enable_retry: bool = False
    durable: bool = True
    # Readers: where a non-durable subscription starts (WIRE 11).
    start_message_id: MessageId | None = None
    active_consumer_listener: ActiveConsumerListener | None = None
    stats_interval_seconds: float = 600.0

    @classmethod
    def from_keywords(cls, keywords: Mapping[str, Any]) -> ConsumerConfiguration:
        """From `subscribe`'s keywords as the official client takes them (a
        schema object, `properties` None, the official policy objects) and
        ours; an unknown keyword is a TypeError, as in a call."""
        values = _field_values(cls, keywords)
        values["schema"] = wire_schema(values.get("schema"))
        values["properties"] = dict(values.get("properties") or {})
        if values.get("batch_receive_policy") is None:
            values.pop("batch_receive_policy", None)
        else:
            values["batch_receive_policy"] = BatchReceivePolicy.from_official(
                values["batch_receive_policy"]
            )
        for name, kind in (
            ("key_shared_policy", KeySharedPolicy),
            ("dead_letter_policy", DeadLetterPolicy),
        ):
            if values.get(name) is not None:
                values[name] = kind.from_official(values[name])
        return cls(**values)

    @classmethod
    def from_reader_keywords(cls, keywords: Mapping[str, Any]) -> ConsumerConfiguration:
        """From `create_reader`'s option keywords (not its topic, start id or
        subscription_role_prefix); a reader_listener is refused (not supported yet)."""
        if keywords.get("reader_listener") is not None:
            raise InvalidConfiguration("reader listeners are not supported yet")
        renamed = {
            cls.READER_KEYWORDS.get(name, name): value
            for name, value in keywords.items()
            if name != "reader_listener"
        }
        return cls.from_keywords(renamed)

    @property
    def ack_timeout(self) -> float:
        return (self.unacked_messages_timeout_ms or 0) / 1000.0

    def validate(self) -> None:
        check_key_reader(self.crypto_key_reader)
        if self.receiver_queue_size < 0:
            raise InvalidConfiguration("receiver_queue_size must be >= 0")
        if self.priority_level < 0:
            raise InvalidConfiguration("priority_level must be >= 0 (0 is the highest)")
        if self.ack_group_time_ms < 0:
            raise InvalidConfiguration("ack_group_time_ms must be >= 0 (0: send at once)")
        if self.negative_ack_redelivery_delay_ms < 0:
            raise InvalidConfiguration("negative_ack_redelivery_delay_ms must be >= 0")
        if self.max_pending_chunked_message < 1:
            raise InvalidConfiguration("max_pending_chunked_message must be >= 1")
        unacked_validate(self.ack_timeout, self.ack_timeout_tick_time_ms / 1000.0)
        if self.enable_retry and self.dead_letter_policy is None:
            raise InvalidConfiguration("enable_retry needs a dead_letter_policy (its counts)")
        # int() first: the official module's enums (pybind11) are not IntEnums.
        self.consumer_type = ConsumerType(int(self.consumer_type))
        self.initial_position = InitialPosition(int(self.initial_position))
        self.regex_subscription_mode = RegexSubscriptionMode(int(self.regex_subscription_mode))
        self.crypto_failure_action = ConsumerCryptoFailureAction(int(self.crypto_failure_action))


def _field_values(
    cls: type[ProducerConfiguration] | type[ConsumerConfiguration], keywords: Mapping[str, Any]
) -> dict[str, Any]:
    """`keywords` by the field each sets; a TypeError for one that sets none
    (INTERNAL fields and the targets of KEYWORDS' renames included)."""
    settable = {f.name for f in dataclasses.fields(cls)} - cls.INTERNAL - set(cls.KEYWORDS.values())
    values: dict[str, Any] = {}
    for name, value in keywords.items():
        target = cls.KEYWORDS.get(name, name)
        if target not in settable and name not in cls.KEYWORDS:
            raise TypeError(f"unexpected keyword argument {name!r}")
        values[target] = value
    return values


def facade_keywords(arguments: Mapping[str, Any], *skip: str) -> dict[str, Any]:
    """A facade method's option keywords from its `locals()`, taken before it
    assigns anything: every argument but `self` and `skip`, with what its
    `**ours` collected merged in."""
    options = {k: v for k, v in arguments.items() if k not in ("self", "ours", *skip)}
    options.update(arguments.get("ours") or {})
    return options


def wire_schema(schema: Any) -> pb.Schema | None:
    """The Schema a producer registers or a consumer declares for a schema
    object (magnetar.client.schema); None for bytes, for which the official
    client sends nothing either."""
    if schema is None:
        return None
    if not callable(getattr(schema, "schema_info", None)):
        raise InvalidConfiguration(
            f"schema must be a magnetar.client.schema object, not {type(schema).__name__}"
        )
    info = schema.schema_info()
    kind = int(info.schema_type())
    if kind == 0:  # Schema.Type None: bytes
        return None
    wire = pb.Schema(name=info.name(), schema_data=info.schema_data())
    wire.type = kind  # type: ignore[assignment]
    wire.properties.extend(
        pb.KeyValue(key=k, value=v) for k, v in sorted(info.properties().items())
    )
    return wire
