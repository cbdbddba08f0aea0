"""Magnetar's blocking client, shaped like the official `pulsar` module.

    from magnetar import client as pulsar

    client = pulsar.Client("pulsar://localhost:6650")
    producer = client.create_producer("my-topic")
    producer.send(b"hello")
    client.close()

Class, method and keyword names and defaults follow `pulsar-client`; our
additions are extra keywords. The asynchronous core runs on a private
event-loop thread (see `magnetar.client.aio` for the awaitable API).
"""

from magnetar.client import schema
from magnetar.client.aio.crypto import CryptoKeyReader, EncryptionContext, EncryptionKey
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
from magnetar.client.aio.errors import *  # noqa: F403 (the official module exports them all)
from magnetar.client.aio.errors import PulsarException, Result
from magnetar.client.aio.net.auth import (
    Authentication,
    AuthenticationBasic,
    AuthenticationTLS,
    AuthenticationToken,
)
from magnetar.client.aio.net.failover import AutoClusterFailover, ServiceInfo, ServiceInfoProvider
from magnetar.client.aio.net.oauth2 import AuthenticationOauth2
from magnetar.client.aio.policies import (
    BatchReceivePolicy as ConsumerBatchReceivePolicy,
    DeadLetterPolicy as ConsumerDeadLetterPolicy,
    KeySharedPolicy as ConsumerKeySharedPolicy,
)
from magnetar.client.sync.client import Client
from magnetar.client.sync.consumer import Consumer
from magnetar.client.sync.loggers import ConsoleLogger, FileLogger, LoggerLevel
from magnetar.client.sync.messages import Message, MessageId
from magnetar.client.sync.producer import Producer
from magnetar.client.sync.reader import Reader
from magnetar.client.sync.table_view import TableView

__all__ = [
    "Authentication",
    "AuthenticationBasic",
    "AuthenticationOauth2",
    "AuthenticationTLS",
    "AuthenticationToken",
    "AutoClusterFailover",
    "BatchingType",
    "Client",
    "CompressionType",
    "ConsoleLogger",
    "Consumer",
    "ConsumerBatchReceivePolicy",
    "ConsumerCryptoFailureAction",
    "ConsumerDeadLetterPolicy",
    "ConsumerKeySharedPolicy",
    "ConsumerType",
    "CryptoKeyReader",
    "EncryptionContext",
    "EncryptionKey",
    "FileLogger",
    "InitialPosition",
    "KeySharedMode",
    "LoggerLevel",
    "Message",
    "MessageId",
    "PartitionsRoutingMode",
    "Producer",
    "ProducerAccessMode",
    "PulsarException",
    "Reader",
    "RegexSubscriptionMode",
    "Result",
    "ServiceInfo",
    "ServiceInfoProvider",
    "TableView",
    "schema",
]
