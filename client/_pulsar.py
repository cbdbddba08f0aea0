"""Compatibility module: the names code written for `pulsar-client` imports
from its C++ binding, `_pulsar`.

Applications (and the official client's own tests) sometimes reach past
`pulsar` into `_pulsar` for a configuration object, an enum or a class to
compare with. This module gives those names backed by our client, so such
code runs unchanged when `_pulsar` resolves here. The configuration objects
hold values with the binding's getter/setter shape (`conf.x()` reads,
`conf.x(value)` sets and returns the object) and its defaults; our Client
takes keywords, so they are for code that builds and inspects them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from magnetar.client.aio.enums import (
    BatchingType,
    CompressionType,
    ConsumerCryptoFailureAction,
    ConsumerType,
    InitialPosition,
    KeySharedMode,
    PartitionsRoutingMode,
    ProducerAccessMode,
    RegexSubscriptionMode,
)
from magnetar.client.aio.errors import *  # noqa: F403 (the binding exports every error)
from magnetar.client.aio.errors import InvalidConfiguration, PulsarException, Result
from magnetar.client.schema.schema import SchemaInfo, SchemaType
from magnetar.client.sync.loggers import LoggerLevel
from magnetar.client.sync.messages import Message, MessageId

__all__ = [
    "BatchingType",
    "ClientConfiguration",
    "CompressionType",
    "ConsumerConfiguration",
    "ConsumerCryptoFailureAction",
    "ConsumerType",
    "InitialPosition",
    "KeySharedMode",
    "LoggerLevel",
    "Message",
    "MessageId",
    "PartitionsRoutingMode",
    "ProducerAccessMode",
    "ProducerConfiguration",
    "PulsarException",
    "ReaderConfiguration",
    "RegexSubscriptionMode",
    "Result",
    "SchemaInfo",
    "SchemaType",
]


class _Options:
    """Values read and written through methods named after them."""

    DEFAULTS: ClassVar[dict[str, Any]] = {}

    def __init__(self) -> None:
        self._values: dict[str, Any] = dict(self.DEFAULTS)
        self._properties: dict[str, str] = {}

    def __getattr__(self, name: str) -> Callable[..., Any]:
        # Only reached for names that are not attributes: the options.
        if name.startswith("_") or name not in self.DEFAULTS:
            raise AttributeError(f"{type(self).__name__} has no option {name!r}")

        def option(*value: Any) -> Any:
            if not value:
                return self._values[name]
            if len(value) > 1:
                raise InvalidConfiguration(f"{name}() takes one value")
            self._values[name] = value[0]
            return self

        return option

    def property(self, name: str, value: str) -> _Options:
        """Add a producer or consumer property (name -> value)."""
        self._properties[str(name)] = str(value)
        return self

    def properties(self) -> dict[str, str]:
        return dict(self._properties)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._values!r})"


class ProducerConfiguration(_Options):
    DEFAULTS: ClassVar[dict[str, Any]] = {
        "producer_name": "",
        "send_timeout_millis": 30000,
        "initial_sequence_id": -1,
        "compression_type": CompressionType.NONE,
        "max_pending_messages": 1000,
        "max_pending_messages_across_partitions": 50000,
        "block_if_queue_full": False,
        "batching_enabled": True,
        "batching_max_messages": 1000,
        "batching_max_allowed_size_in_bytes": 128 * 1024,
        "batching_max_publish_delay_ms": 10,
        "batching_type": BatchingType.Default,
        "chunking_enabled": False,
        "partitions_routing_mode": PartitionsRoutingMode.RoundRobinDistribution,
        "lazy_start_partitioned_producers": False,
        "access_mode": ProducerAccessMode.Shared,
        "schema": None,
        "crypto_key_reader": None,
        "encryption_key": None,
        "message_router": None,
    }


class ConsumerConfiguration(_Options):
    DEFAULTS: ClassVar[dict[str, Any]] = {
        "consumer_name": "",
        "consumer_type": ConsumerType.Exclusive,
        "receiver_queue_size": 1000,
        "max_total_receiver_queue_size_across_partitions": 50000,
        "unacked_messages_timeout_ms": 0,
        "negative_ack_redelivery_delay_ms": 60000,
        "broker_consumer_stats_cache_time_ms": 30000,
        "subscription_initial_position": InitialPosition.Latest,
        "regex_subscription_mode": RegexSubscriptionMode.PersistentOnly,
        "pattern_auto_discovery_period": 60,
        "read_compacted": False,
        "replicate_subscription_state_enabled": False,
        "start_message_id_inclusive": False,
        "batch_index_ack_enabled": False,
        "max_pending_chunked_message": 10,
        "auto_ack_oldest_chunked_message_on_queue_full": False,
        "crypto_failure_action": ConsumerCryptoFailureAction.FAIL,
        "key_shared_policy": None,
        "batch_receive_policy": None,
        "dead_letter_policy": None,
        "message_listener": None,
        "schema": None,
        "crypto_key_reader": None,
    }


class ReaderConfiguration(_Options):
    DEFAULTS: ClassVar[dict[str, Any]] = {
        "reader_name": "",
        "receiver_queue_size": 1000,
        "read_compacted": False,
        "start_message_id_inclusive": False,
        "subscription_role_prefix": "",
        "crypto_failure_action": ConsumerCryptoFailureAction.FAIL,
        "reader_listener": None,
        "schema": None,
        "crypto_key_reader": None,
    }


class ClientConfiguration(_Options):
    DEFAULTS: ClassVar[dict[str, Any]] = {
        "operation_timeout_seconds": 30,
        "connection_timeout": 10000,
        "io_threads": 1,
        "message_listener_threads": 1,
        "concurrent_lookup_requests": 50000,
        "stats_interval_in_seconds": 600,
        "tls_trust_certs_file_path": "",
        "tls_private_key_file_path": "",
        "tls_certificate_file_path": "",
        "tls_allow_insecure_connection": False,
        "tls_validate_hostname": False,
        "listener_name": "",
        "authentication": None,
    }
