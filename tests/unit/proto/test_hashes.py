"""Murmur3 for Key_Shared (SEM-4.4) and the producers' partition-routing hashes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from magnetar.proto.hashes import (
    DEFAULT_HASHING_SCHEME,
    KEY_SHARED_SLOTS,
    HashingScheme,
    boost_hash,
    boost_hash_64,
    cpp_java_string_hash,
    java_string_hash,
    java_string_hash_code,
    key_shared_slot,
    murmur3_32,
    murmur3_32_hash,
    partition_for_key,
    routing_hash,
)


def test_sem_4_4_1_key_vector() -> None:
    """SEM-4.4.1: murmur3("Order-3459134") = 3112179635, slot 6067."""
    assert murmur3_32("Order-3459134") == 3112179635
    assert murmur3_32(b"Order-3459134") == 3112179635
    assert key_shared_slot("Order-3459134") == 6067


def test_sem_4_4_2_consistent_hashing_points() -> None:
    """SEM-4.4.2: points of "orders-aggregator-pod-2345-consumer" at i = 1, 2, 100."""
    name = "orders-aggregator-pod-2345-consumer"
    assert murmur3_32(name + "1") == 1003084738
    assert murmur3_32(name + "2") == 373317202
    assert murmur3_32(name + "100") == 320276078


def test_murmur3_reference_vectors() -> None:
    # Published Murmur3 x86_32 vectors (seed 0 unless given).
    assert murmur3_32(b"") == 0
    assert murmur3_32(b"", seed=1) == 0x514E28B7
    assert murmur3_32(b"hello") == 0x248BFA47
    assert murmur3_32(b"The quick brown fox jumps over the lazy dog") == 0x2E4FF723


@settings(max_examples=100, deadline=None)
@given(key=st.binary(max_size=64))
def test_slot_is_in_range(key: bytes) -> None:
    assert 0 <= key_shared_slot(key) < KEY_SHARED_SLOTS
    assert 0 <= murmur3_32(key) < 2**32


def test_java_string_hash_code_matches_java() -> None:
    # Values of java.lang.String.hashCode().
    assert java_string_hash_code("") == 0
    assert java_string_hash_code("hello") == 99162322
    assert java_string_hash_code("Hello World") == -862545276
    assert java_string_hash_code("polygenelubricants") == -(2**31)
    # Non-BMP: hashed as its UTF-16 surrogate pair 0xD834 0xDD1E.
    assert java_string_hash_code("\U0001d11e") == 0xD834 * 31 + 0xDD1E
    assert java_string_hash("polygenelubricants") == 0
    assert java_string_hash("Hello World") == -862545276 & 0x7FFFFFFF


def test_cpp_java_string_hash_differs_only_beyond_ascii() -> None:
    for key in ("", "hello", "Order-3459134", "key-17"):
        assert cpp_java_string_hash(key) == java_string_hash(key)
    # "é" is U+00E9 in UTF-16 but bytes C3 A9 (signed -61, -87) for the C++ client.
    assert java_string_hash("é") == 0xE9
    assert cpp_java_string_hash("é") == (31 * -61 - 87) & 0x7FFFFFFF


def test_murmur3_32_hash_masks_the_sign_bit() -> None:
    assert murmur3_32_hash("Order-3459134") == 3112179635 & 0x7FFFFFFF


def test_boost_hash_regression_values() -> None:
    """Pinned values of the hash the official client agrees with.

    tests/integration/proto/test_official_routing.py checks the official client
    routes by it; pinning values here catches accidental edits without a
    client. The keys cover every code path: 0, 1-3, 4-7 and 8+ bytes, multi-byte
    UTF-8.
    """
    assert {k: boost_hash(k) for k in BOOST_VECTORS} == BOOST_VECTORS
    assert all(boost_hash_64(k) == boost_hash_64(k.encode()) for k in BOOST_VECTORS)


BOOST_VECTORS = {
    "": 2133126054,
    "a": 2135870748,
    "abc": 1074445565,
    "abcd": 246651746,
    "Order-3459134": 120022018,
    "日本語": 18892553,
}


def test_default_scheme_is_the_official_python_clients() -> None:
    assert DEFAULT_HASHING_SCHEME is HashingScheme.BoostHash
    assert routing_hash("Order-3459134") == boost_hash("Order-3459134")


@pytest.mark.parametrize("scheme", list(HashingScheme))
def test_partition_for_key_is_hash_mod_n(scheme: HashingScheme) -> None:
    for key in ("a", "Order-3459134", "日本語", "x" * 40):
        for n in (1, 2, 7, 100):
            assert partition_for_key(key, n, scheme) == routing_hash(key, scheme) % n
            assert 0 <= routing_hash(key, scheme) <= 0x7FFFFFFF


def test_partition_for_key_rejects_no_partitions() -> None:
    with pytest.raises(ValueError, match="positive"):
        partition_for_key("k", 0)
