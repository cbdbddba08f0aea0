"""Option enums, with the official client's member names and values."""

from __future__ import annotations

from enum import IntEnum


class CompressionType(IntEnum):
    """Values equal the wire's CompressionType."""

    NONE = 0
    LZ4 = 1
    ZLib = 2
    ZSTD = 3
    SNAPPY = 4


class PartitionsRoutingMode(IntEnum):
    UseSinglePartition = 0
    RoundRobinDistribution = 1
    CustomPartition = 2


class BatchingType(IntEnum):
    Default = 0
    KeyBased = 1


class ProducerAccessMode(IntEnum):
    """Values equal the wire's ProducerAccessMode."""

    Shared = 0
    Exclusive = 1
    WaitForExclusive = 2
    ExclusiveWithFencing = 3


class ConsumerType(IntEnum):
    """Values equal the wire's SubType."""

    Exclusive = 0
    Shared = 1
    Failover = 2
    KeyShared = 3


class InitialPosition(IntEnum):
    Latest = 0
    Earliest = 1


class KeySharedMode(IntEnum):
    AutoSplit = 0
    Sticky = 1


class RegexSubscriptionMode(IntEnum):
    PersistentOnly = 0
    NonPersistentOnly = 1
    AllTopics = 2


class ConsumerCryptoFailureAction(IntEnum):
    FAIL = 0
    DISCARD = 1
    CONSUME = 2
