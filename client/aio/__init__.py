"""The asynchronous client core: `Client`, producers and consumers as awaitables.

async with Client("pulsar://localhost:6650") as client:
    producer = await client.create_producer("my-topic", ProducerConfiguration())
    msg_id = await producer.send(OutgoingMessage(b"hello"))

Options come as a ProducerConfiguration / ConsumerConfiguration; the
facades (`magnetar.client`, `magnetar.client.asyncio`) take the official
client's keywords instead.
"""

from magnetar.client.aio.client import Client
from magnetar.client.aio.config import ConsumerConfiguration, ProducerConfiguration
from magnetar.client.aio.consumer.consumer import Consumer
from magnetar.client.aio.enums import (
    BatchingType,
    CompressionType,
    ConsumerType,
    InitialPosition,
    PartitionsRoutingMode,
    ProducerAccessMode,
)
from magnetar.client.aio.errors import PulsarException, Result
from magnetar.client.aio.message import Message, OutgoingMessage
from magnetar.client.aio.producer.partitioned import PartitionedProducer
from magnetar.client.aio.producer.producer import Producer
from magnetar.proto.ids import MessageId

__all__ = [
    "BatchingType",
    "Client",
    "CompressionType",
    "Consumer",
    "ConsumerConfiguration",
    "ConsumerType",
    "InitialPosition",
    "Message",
    "MessageId",
    "OutgoingMessage",
    "PartitionedProducer",
    "PartitionsRoutingMode",
    "Producer",
    "ProducerAccessMode",
    "ProducerConfiguration",
    "PulsarException",
    "Result",
]
