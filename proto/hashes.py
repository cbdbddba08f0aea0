"""Hashes on the wire's behalf: Key_Shared slots and producer partition routing.

- `murmur3_32`: Murmur3 x86 32-bit, seed 0, unsigned; Key_Shared hashes sticky
  keys with it and a slot is `hash % 65536` (SEM-4.4).
- Partition routing for messages with a key, as the official clients do it:
  `partition = hash(key) % num_partitions` with one of
  * JavaStringHash: Java's `String.hashCode()` (31*h + UTF-16 code unit,
    signed 32-bit), masked with Integer.MAX_VALUE;
  * Murmur3_32Hash: murmur3_32 (seed 0) of the UTF-8 bytes, masked with
    Integer.MAX_VALUE.
"""

from __future__ import annotations

from enum import Enum

import mmh3

KEY_SHARED_SLOTS = 65536
_INT32_MAX = 0x7FFFFFFF
_U32_MASK = 0xFFFFFFFF


def _as_bytes(data: str | bytes) -> bytes:
    return data.encode() if isinstance(data, str) else data


def murmur3_32(data: str | bytes, seed: int = 0) -> int:
    """Murmur3 x86 32-bit of `data` (str is UTF-8 encoded), unsigned."""
    return int(mmh3.hash(_as_bytes(data), seed, signed=False))


def key_shared_slot(key: str | bytes) -> int:
    """The Key_Shared hash slot of a sticky key, in [0, 65536) (SEM-4.4)."""
    return murmur3_32(key) % KEY_SHARED_SLOTS


def java_string_hash_code(text: str) -> int:
    """Java's `String.hashCode()`: signed 32-bit over UTF-16 code units."""
    raw = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(raw), 2):
        h = (31 * h + ((raw[i] << 8) | raw[i + 1])) & _U32_MASK
    return h - (1 << 32) if h & 0x80000000 else h


def java_string_hash(key: str) -> int:
    """Pulsar's JavaStringHash routing value: hashCode() & Integer.MAX_VALUE."""
    return java_string_hash_code(key) & _INT32_MAX


def murmur3_32_hash(key: str | bytes) -> int:
    """Pulsar's Murmur3_32Hash routing value: murmur3_32(utf-8) & Integer.MAX_VALUE."""
    return murmur3_32(key) & _INT32_MAX


class HashingScheme(Enum):
    """Producer hashing schemes of the official clients."""

    JavaStringHash = "JavaStringHash"
    Murmur3_32Hash = "Murmur3_32Hash"


def routing_hash(key: str, scheme: HashingScheme) -> int:
    if scheme is HashingScheme.JavaStringHash:
        return java_string_hash(key)
    return murmur3_32_hash(key)


def partition_for_key(
    key: str, num_partitions: int, scheme: HashingScheme = HashingScheme.Murmur3_32Hash
) -> int:
    """The partition a keyed message goes to on a topic with `num_partitions`."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    return routing_hash(key, scheme) % num_partitions
