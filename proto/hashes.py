"""Hashes on the wire's behalf: Key_Shared slots and producer partition routing.

- `murmur3_32`: Murmur3 x86 32-bit, seed 0, unsigned; Key_Shared hashes sticky
  keys with it and a slot is `hash % 65536` (SEM-4.4).
- Partition routing of a message with a (non-empty) partition key, as the
  official clients do it: `partition = hash(key) % num_partitions`, where hash
  is one of these producer "hashing schemes", each masked to a non-negative
  int32 (`& 0x7fffffff`):
  * BoostHash: `boost::hash<std::string>` of the UTF-8 bytes. It is the C++
    client's default, and the Python `pulsar-client` (3.13, C++ core 4.2) cannot
    change it, so it is what the official Python client uses. The wheel's
    Boost is recent enough that its string hash is the 64-bit "mulx" hash
    (8-byte little-endian reads, multiply-and-fold), not the old hash_combine
    loop; `boost_hash` re-implements it from the algorithm's description.
    Verified empirically (tests/integration/proto/test_official_routing.py):
    the official client, producing with keys to a fake broker that reports N
    partitions, picks `boost_hash(key) % N` for every key tried (ASCII and
    multi-byte UTF-8, 1 to 40 chars, N in {3, 5, 7, 16}); the old hash_combine
    variants, libstdc++ std::hash, murmur3 and both Java string hashes match
    about 1 key in N. An empty key counts as no key (round robin).
  * JavaStringHash: Java's `String.hashCode()` (31*h + UTF-16 code unit,
    wrapping at 32 bits); the Java client's default. The C++ client's
    JavaStringHash sums *signed UTF-8 bytes* instead, which only agrees for
    ASCII: `cpp_java_string_hash` is that variant.
  * Murmur3_32Hash: murmur3_32 (seed 0) of the UTF-8 bytes.
"""

from __future__ import annotations

from enum import Enum

import mmh3

KEY_SHARED_SLOTS = 65536
_INT32_MAX = 0x7FFFFFFF
_U32_MASK = 0xFFFFFFFF
_U64_MASK = (1 << 64) - 1
# Boost's mulx string hash constants: the golden ratio and its inverse mod 2**64.
_BOOST_Q = 0x9E3779B97F4A7C15
_BOOST_K = 0xDF442D22CE4859B9


def _as_bytes(data: str | bytes) -> bytes:
    return data.encode() if isinstance(data, str) else data


def murmur3_32(data: str | bytes, seed: int = 0) -> int:
    """Murmur3 x86 32-bit of `data` (str is UTF-8 encoded), unsigned."""
    # mmh3 encodes a str as UTF-8 itself; positional arguments: on the
    # Key_Shared dispatch path, once per entry read.
    return mmh3.hash(data, seed, False)


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


def cpp_java_string_hash(key: str | bytes) -> int:
    """The C++ client's JavaStringHash: 31*h + signed UTF-8 byte, & INT32_MAX."""
    h = 0
    for byte in _as_bytes(key):
        h = (31 * h + (byte - 256 if byte > 127 else byte)) & _U32_MASK
    return h & _INT32_MAX


def _mulx(x: int, y: int) -> int:
    # 64x64 -> 128-bit product, folded by xor-ing its halves.
    product = x * y
    return (product & _U64_MASK) ^ (product >> 64)


def boost_hash_64(key: str | bytes, seed: int = 0) -> int:
    """`boost::hash_range` over chars on 64-bit targets (Boost >= 1.81), unsigned 64-bit."""
    data = _as_bytes(key)
    n = len(data)
    w = _mulx((seed + _BOOST_Q) & _U64_MASK, _BOOST_K)
    h = w ^ n
    pos = 0
    while n - pos >= 8:
        w = (w + _BOOST_Q) & _U64_MASK
        h ^= _mulx((int.from_bytes(data[pos : pos + 8], "little") + w) & _U64_MASK, _BOOST_K)
        pos += 8
    rest = n - pos
    if rest >= 4:
        # Two overlapping 4-byte reads cover 4 to 7 bytes.
        low = int.from_bytes(data[pos : pos + 4], "little")
        high = int.from_bytes(data[pos + rest - 4 : pos + rest], "little")
        tail = (high << ((rest - 4) * 8)) | low
    elif rest >= 1:
        x1 = (rest - 1) & 2
        x2 = rest >> 1
        tail = (data[pos + x1] << (x1 * 8)) | (data[pos + x2] << (x2 * 8)) | data[pos]
    else:
        tail = 0
    w = (w + _BOOST_Q) & _U64_MASK
    h ^= _mulx((tail + w) & _U64_MASK, _BOOST_K)
    return _mulx((h + w) & _U64_MASK, _BOOST_K)


def boost_hash(key: str | bytes) -> int:
    """The C++ client's BoostHash routing value: boost::hash(key) & INT32_MAX."""
    return boost_hash_64(key) & _INT32_MAX


class HashingScheme(Enum):
    """Producer hashing schemes of the official clients."""

    BoostHash = "BoostHash"
    JavaStringHash = "JavaStringHash"
    Murmur3_32Hash = "Murmur3_32Hash"


# What the official Python client (C++ core) uses; it cannot be changed there.
DEFAULT_HASHING_SCHEME = HashingScheme.BoostHash


def routing_hash(key: str, scheme: HashingScheme = DEFAULT_HASHING_SCHEME) -> int:
    """The non-negative 31-bit hash a producer routes `key` by."""
    if scheme is HashingScheme.BoostHash:
        return boost_hash(key)
    if scheme is HashingScheme.JavaStringHash:
        return java_string_hash(key)
    return murmur3_32_hash(key)


def partition_for_key(
    key: str, num_partitions: int, scheme: HashingScheme = DEFAULT_HASHING_SCHEME
) -> int:
    """The partition a keyed message goes to on a topic with `num_partitions`.

    Callers route an empty or missing key round robin instead, as the official
    client does.
    """
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    return routing_hash(key, scheme) % num_partitions
