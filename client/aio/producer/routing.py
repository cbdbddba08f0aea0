"""Message routers for partitioned producers, behaving like the official C++ client's.

A message with a partition key always goes to `hash(key) % n` (BoostHash by
default, as the official Python client; see magnetar.proto.hashes). Without a
key: round robin (switching partition per batch when batching is on, per
message otherwise), or one partition chosen at random for the producer's
life, or the application's own router.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping

from magnetar.client.aio.config import MessageRouter, ProducerConfiguration
from magnetar.client.aio.enums import PartitionsRoutingMode
from magnetar.client.aio.errors import InvalidConfiguration
from magnetar.client.aio.message import OutgoingMessage
from magnetar.proto.hashes import HashingScheme, partition_for_key


class RoutingMessage:
    """What a custom `message_router` sees: the official Message accessors."""

    __slots__ = ("_msg",)

    def __init__(self, msg: OutgoingMessage) -> None:
        self._msg = msg

    def data(self) -> bytes:
        return self._msg.payload

    def value(self) -> bytes:
        return self._msg.payload

    def properties(self) -> Mapping[str, str]:
        return dict(self._msg.properties or {})

    def partition_key(self) -> str:
        return self._msg.partition_key or ""

    def ordering_key(self) -> str:
        return (self._msg.ordering_key or b"").decode(errors="replace")

    def event_timestamp(self) -> int:
        return self._msg.event_time or 0


class Router:
    """Picks the partition for each message."""

    def __init__(
        self,
        conf: ProducerConfiguration,
        num_partitions: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        rand: random.Random | None = None,
    ) -> None:
        self.num_partitions = num_partitions
        self.mode = PartitionsRoutingMode(conf.message_routing_mode)
        self.hashing_scheme: HashingScheme = conf.hashing_scheme
        self.custom: MessageRouter | None = conf.message_router
        if self.custom is not None:
            self.mode = PartitionsRoutingMode.CustomPartition
        elif self.mode == PartitionsRoutingMode.CustomPartition:
            raise InvalidConfiguration("CustomPartition routing needs a message_router")
        self._clock = clock
        rng = rand or random.Random()
        self._single = rng.randrange(num_partitions)
        self._cursor = rng.randrange(num_partitions)
        self._batching = conf.batching_enabled
        self._batch_max_messages = max(conf.batching_max_messages, 1)
        self._batch_max_bytes = max(conf.batching_max_allowed_size_in_bytes, 1)
        self._batch_delay = conf.batching_max_publish_delay_ms / 1000.0
        self._batch_messages = 0
        self._batch_bytes = 0
        self._batch_started = clock()

    def choose(self, msg: OutgoingMessage) -> int:
        n = self.num_partitions
        if self.custom is not None:
            index = int(self.custom(RoutingMessage(msg), n))
            if not 0 <= index < n:
                raise InvalidConfiguration(f"message_router returned {index} for {n} partitions")
            return index
        key = msg.partition_key
        if key:
            return partition_for_key(key, n, self.hashing_scheme)
        if self.mode == PartitionsRoutingMode.UseSinglePartition:
            return self._single
        if not self._batching:
            self._cursor = (self._cursor + 1) % n
            return self._cursor
        # Batching: stay on one partition until a batch would be full or old,
        # so unkeyed messages still form full batches.
        now = self._clock()
        size = len(msg.payload)
        if (
            self._batch_messages + 1 > self._batch_max_messages
            or self._batch_bytes + size > self._batch_max_bytes
            or now - self._batch_started >= self._batch_delay
        ):
            self._cursor = (self._cursor + 1) % n
            self._batch_messages = 0
            self._batch_bytes = 0
            self._batch_started = now
        self._batch_messages += 1
        self._batch_bytes += size
        return self._cursor
