"""Producer and consumer configuration: the official client's option names and defaults."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from magnetar.client.aio.enums import (
    BatchingType,
    CompressionType,
    ConsumerType,
    InitialPosition,
    PartitionsRoutingMode,
    ProducerAccessMode,
)
from magnetar.client.aio.errors import InvalidConfiguration
from magnetar.proto.hashes import DEFAULT_HASHING_SCHEME, HashingScheme

# message_router(message, num_partitions) -> partition index
MessageRouter = Callable[[Any, int], int]


@dataclass
class ProducerConfiguration:
    producer_name: str | None = None
    initial_sequence_id: int | None = None
    send_timeout_millis: int = 30000
    compression_type: CompressionType = CompressionType.NONE
    max_pending_messages: int = 1000
    max_pending_messages_across_partitions: int = 50000
    block_if_queue_full: bool = False
    batching_enabled: bool = False
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
    # Our additions (keywords the official Python client does not have).
    chunk_max_message_size: int | None = None
    hashing_scheme: HashingScheme = DEFAULT_HASHING_SCHEME

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
        self.compression_type = CompressionType(self.compression_type)
        self.access_mode = ProducerAccessMode(self.access_mode)
        self.batching_type = BatchingType(self.batching_type)
        self.message_routing_mode = PartitionsRoutingMode(self.message_routing_mode)


@dataclass
class ConsumerConfiguration:
    consumer_type: ConsumerType = ConsumerType.Exclusive
    receiver_queue_size: int = 1000
    consumer_name: str | None = None
    initial_position: InitialPosition = InitialPosition.Latest
    properties: Mapping[str, str] = field(default_factory=dict)
    max_pending_chunked_message: int = 10
    auto_ack_oldest_chunked_message_on_queue_full: bool = False

    def validate(self) -> None:
        if self.receiver_queue_size < 0:
            raise InvalidConfiguration("receiver_queue_size must be >= 0")
        self.consumer_type = ConsumerType(self.consumer_type)
        self.initial_position = InitialPosition(self.initial_position)
