"""Record format: encode, scan, torn tails, corruption (DESIGN "Storage")."""

from __future__ import annotations

import pytest

from magnetar.broker.storage.api import Position
from magnetar.broker.storage.records import (
    HEADER_SIZE,
    CorruptEntryError,
    decode_range,
    encode_group,
    encode_record,
    scan,
)

DATAS = [b"", b"a", b"hello world", bytes(range(256)) * 3]
NMSGS = [1, 2, 3, 10]


def test_scan_indexes_every_record() -> None:
    buf = b"".join(encode_group(DATAS, NMSGS))
    result = scan(buf)
    assert list(result.cum_messages) == [0, 1, 3, 6, 16]
    assert result.valid_end == len(buf)
    assert len(result.offsets) == len(DATAS) + 1
    sizes = [result.offsets[i + 1] - result.offsets[i] - HEADER_SIZE for i in range(len(DATAS))]
    assert sizes == [len(d) for d in DATAS]
    assert not result.corrupt


def test_one_record_encodes_as_a_group_of_one() -> None:
    """The single-entry fast path writes the very bytes the group path does."""
    for data, nmsgs in zip(DATAS, NMSGS, strict=True):
        assert encode_record(data, nmsgs) == encode_group([data], [nmsgs])
    assert scan(b"".join(encode_record(b"x" * 100, 7))).cum_messages.tolist() == [0, 7]


def test_decode_range_returns_identical_bytes() -> None:
    buf = b"".join(encode_group(DATAS, NMSGS))
    offsets = list(scan(buf).offsets)
    entries = decode_range(buf[offsets[1] :], 7, 1, offsets[1:], offsets[1])
    assert [e.data for e in entries] == DATAS[1:]
    assert [e.position for e in entries] == [Position(7, 1), Position(7, 2), Position(7, 3)]
    assert [e.num_messages for e in entries] == NMSGS[1:]


def test_every_torn_tail_is_cut_at_the_last_whole_record() -> None:
    good = b"".join(encode_group(DATAS[:3], NMSGS[:3]))
    last = b"".join(encode_group(DATAS[3:], NMSGS[3:]))
    for cut in range(len(last)):
        result = scan(good + last[:cut])
        assert result.valid_end == len(good), cut
        assert len(result.offsets) == 4


def test_a_flipped_byte_stops_the_scan_at_that_record() -> None:
    buf = bytearray(b"".join(encode_group(DATAS, NMSGS)))
    offsets = list(scan(bytes(buf)).offsets)
    buf[offsets[2] + HEADER_SIZE + 3] ^= 0x40
    result = scan(bytes(buf))
    assert result.valid_end == offsets[2]
    assert result.corrupt


def test_zero_fill_is_not_a_record() -> None:
    buf = b"".join(encode_group(DATAS[:2], NMSGS[:2]))
    result = scan(buf + bytes(4096))
    assert result.valid_end == len(buf)


def test_decode_detects_corruption() -> None:
    buf = bytearray(b"".join(encode_group([b"payload"], [1])))
    buf[-1] ^= 1
    with pytest.raises(CorruptEntryError):
        decode_range(bytes(buf), 1, 0, [0, len(buf)], 0)


def test_scan_limit_takes_only_the_recorded_entries() -> None:
    buf = b"".join(encode_group(DATAS, NMSGS)) + bytes(100)
    assert len(scan(buf, verify=False, limit=2).offsets) == 3
    # Without checksums a zero header would parse: the limit is what stops it.
    assert len(scan(buf, verify=False, limit=4).offsets) == 5
