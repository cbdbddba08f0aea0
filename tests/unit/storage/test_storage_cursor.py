"""ManagedCursor: reads, acks, gap closing, batch indexes, rewind, seek, reset, search
(SEM-3.1, 3.2, 3.3, 5.2, 5.3, 5.6).
"""

from __future__ import annotations

import asyncio
import struct

import pytest

from magnetar.broker.storage import (
    EARLIEST,
    LATEST,
    ConcurrentReadError,
    CursorAlreadyExists,
    CursorClosed,
    Entry,
    FileManagedLedgerFactory,
    InitialPosition,
    InvalidPosition,
    ManagedLedgerConfig,
    Position,
)
from magnetar.broker.storage.ledger import ManagedLedgerImpl
from tests.unit.storage.storage_support import OpenFactory

NAME = "public/default/persistent/c"


async def _ledger_with(
    factory: FileManagedLedgerFactory, n: int, **config: object
) -> tuple[ManagedLedgerImpl, list[Position]]:
    ml = await factory.open_impl(NAME, ManagedLedgerConfig(**config) if config else None)  # type: ignore[arg-type]
    positions = [await ml.add_entry(b"e%d" % i, num_messages=2) for i in range(n)]
    return ml, positions


async def test_new_cursor_starts_latest_or_earliest(factory: FileManagedLedgerFactory) -> None:
    """SEM-5.3: a new cursor starts at the end (Latest) or the beginning (Earliest)."""
    ml, positions = await _ledger_with(factory, 3)
    latest = await ml.open_cursor("latest")
    earliest = await ml.open_cursor("earliest", InitialPosition.EARLIEST)
    assert latest.mark_delete_position == positions[-1]
    assert await latest.read_entries(10) == []
    assert not latest.has_more_entries()
    assert earliest.backlog_entries == 3 and earliest.backlog_messages == 6
    assert earliest.has_more_entries()
    assert [e.position for e in await earliest.read_entries(10)] == positions
    new = await ml.add_entry(b"new")
    assert [e.position for e in await latest.read_entries(10)] == [new]
    # Opening again returns the same cursor; initial position only on creation.
    assert await ml.open_cursor("latest", InitialPosition.EARLIEST) is latest


async def test_read_advances_and_skips_individually_deleted(
    factory: FileManagedLedgerFactory,
) -> None:
    ml, p = await _ledger_with(factory, 10)
    c = await ml.open_cursor("s", InitialPosition.EARLIEST)
    c.delete([p[1], p[2], p[5]])
    got = await c.read_entries(4)
    assert [e.position for e in got] == [p[0], p[3], p[4], p[6]]
    assert c.read_position == p[7]
    got = await c.read_entries(100)
    assert [e.position for e in got] == [p[7], p[8], p[9]]
    assert await c.read_entries(100) == []


async def test_individual_acks_close_gaps_and_move_mark_delete(
    factory: FileManagedLedgerFactory,
) -> None:
    """SEM-3.1: mark-delete moves forward as soon as every position up to it is acked."""
    ml, p = await _ledger_with(factory, 6)
    c = await ml.open_cursor("s", InitialPosition.EARLIEST)
    start = c.mark_delete_position
    c.delete([p[2], p[3]])
    assert c.mark_delete_position == start
    assert c.is_deleted(p[2]) and c.is_deleted(p[3]) and not c.is_deleted(p[1])
    assert c.backlog_entries == 4 and c.backlog_messages == 8
    c.delete([p[0]])
    assert c.mark_delete_position == p[0]
    c.delete([p[1]])  # closes the gap: mark-delete jumps over 2 and 3
    assert c.mark_delete_position == p[3]
    assert c.backlog_entries == 2
    c.delete([p[1], p[0]])  # already acked: no-op
    assert c.mark_delete_position == p[3]


async def test_a_run_of_acks_after_mark_delete_moves_it_at_once(
    factory: FileManagedLedgerFactory,
) -> None:
    """SEM-3.1: acks handed over as a list of consecutive positions (a
    replicator's receipts) move mark-delete to the last in one step, and
    lists that only look like a run (same ends and length, a gap or a
    repeat inside, one past the end) are taken position by position."""
    ml, p = await _ledger_with(factory, 12)
    c = await ml.open_cursor("s", InitialPosition.EARLIEST)
    c.delete(p[0:4])
    assert c.mark_delete_position == p[3] and c.backlog_entries == 8
    c.delete([p[4], p[4], p[6]])  # ends 4 and 6, three long: not a run
    assert c.mark_delete_position == p[4]
    assert c.is_deleted(p[6]) and not c.is_deleted(p[5])
    c.delete([p[5], p[7]])  # closes the gap at 5 (through the ranges)
    assert c.mark_delete_position == p[7]
    c.delete([p[9], p[10]])  # not right after mark-delete: ranges
    assert c.mark_delete_position == p[7] and c.is_deleted(p[10])
    c.delete([p[8]])
    assert c.mark_delete_position == p[10]
    beyond = Position(p[11].ledger_id, p[11].entry_id + 1)
    c.delete([p[11], beyond])  # ends past the last entry: not a run
    assert c.mark_delete_position == p[11] and c.backlog_entries == 0
    await c.close()
    reopened = await ml.open_cursor("s")
    assert reopened.mark_delete_position == p[11]  # the run was persisted


async def test_gap_closes_across_a_ledger_boundary(factory: FileManagedLedgerFactory) -> None:
    ml, p = await _ledger_with(factory, 12, max_segment_size=1024)
    c = await ml.open_cursor("keep", InitialPosition.EARLIEST)
    ml2 = [await ml.add_entry(b"x" * 600) for _ in range(6)]
    ledgers = sorted({q.ledger_id for q in ml2})
    assert len(ledgers) >= 2
    everything = p + ml2
    c.delete(reversed(everything[1:]))
    assert c.mark_delete_position < everything[0]
    c.delete([everything[0]])
    assert c.mark_delete_position == everything[-1]
    assert c.backlog_entries == 0


async def test_mark_delete_is_cumulative(factory: FileManagedLedgerFactory) -> None:
    """SEM-3.2: a cumulative ack moves mark-delete and drops what lies before it."""
    ml, p = await _ledger_with(factory, 8)
    c = await ml.open_cursor("s", InitialPosition.EARLIEST)
    c.delete([p[1], p[5]])
    c.delete_batch_indexes(p[3], [0b0110])
    c.mark_delete(p[3], {"k": 7})
    assert c.mark_delete_position == p[3]
    assert c.properties == {"k": 7}
    assert c.get_batch_ack_set(p[3]) is None
    assert c.backlog_entries == 3  # 4, 6, 7
    c.mark_delete(p[4])  # closes the gap to 5
    assert c.mark_delete_position == p[5]
    assert c.properties == {"k": 7}
    c.mark_delete(p[1], {"k": 1})  # older: ignored
    assert c.mark_delete_position == p[5] and c.properties == {"k": 7}
    with pytest.raises(InvalidPosition):
        c.mark_delete(Position(p[0].ledger_id, 100))


async def test_batch_index_acks_and_the_bitset(factory: FileManagedLedgerFactory) -> None:
    """SEM-3.3: set bits are the still-unacked indexes; ANDed; empty = entry acked."""
    ml, p = await _ledger_with(factory, 3)
    c = await ml.open_cursor("s", InitialPosition.EARLIEST)
    assert c.get_batch_ack_set(p[1]) is None
    c.delete_batch_indexes(p[1], [0b11110])  # batch of 5, index 0 acked
    assert c.get_batch_ack_set(p[1]) == [0b11110]
    c.delete_batch_indexes(p[1], [0b10111])  # index 3 acked too
    assert c.get_batch_ack_set(p[1]) == [0b10110]
    assert not c.is_deleted(p[1])
    c.delete_batch_indexes(p[1], [0b01001])
    assert c.is_deleted(p[1])
    assert c.get_batch_ack_set(p[1]) is None


async def test_batch_index_bitsets_of_several_words(factory: FileManagedLedgerFactory) -> None:
    ml, p = await _ledger_with(factory, 1)
    c = await ml.open_cursor("s", InitialPosition.EARLIEST)
    # 100 messages; Java longs are signed: bit 63 set makes a negative word.
    words = [-1, (1 << 36) - 1]
    c.delete_batch_indexes(p[0], words)
    assert c.get_batch_ack_set(p[0]) == words
    c.delete_batch_indexes(p[0], [-2, 0])
    assert c.get_batch_ack_set(p[0]) == [-2]
    # Unsigned form of the same words is accepted as well.
    c.delete_batch_indexes(p[0], [struct.unpack("<Q", struct.pack("<q", -4))[0]])
    assert c.get_batch_ack_set(p[0]) == [-4]


async def test_rewind_and_seek(factory: FileManagedLedgerFactory) -> None:
    """SEM-5.3: rewind = first not acked after mark-delete."""
    ml, p = await _ledger_with(factory, 6)
    c = await ml.open_cursor("s", InitialPosition.EARLIEST)
    await c.read_entries(6)
    c.delete([p[0], p[2]])
    c.rewind()
    assert c.read_position == p[1]
    assert [e.position for e in await c.read_entries(10)] == [p[1], p[3], p[4], p[5]]
    c.seek(p[4])
    assert [e.position for e in await c.read_entries(10)] == [p[4], p[5]]
    c.seek(p[0])  # at/before mark-delete: clamped after it
    assert c.read_position == p[1]


async def test_reset_cursor_forgets_acks(factory: FileManagedLedgerFactory) -> None:
    ml, p = await _ledger_with(factory, 6)
    c = await ml.open_cursor("s", InitialPosition.EARLIEST)
    c.mark_delete(p[3])
    c.delete([p[5]])
    await c.reset_cursor(p[1])
    assert c.mark_delete_position == p[0]
    assert c.read_position == p[1]
    assert not c.is_deleted(p[5])
    assert c.backlog_entries == 5
    await c.reset_cursor(LATEST)
    assert c.backlog_entries == 0
    await c.reset_cursor(EARLIEST)
    assert c.backlog_entries == 6
    assert [e.position for e in await c.read_entries(1)] == [p[0]]


async def test_find_newest_matching_for_reset_by_time(factory: FileManagedLedgerFactory) -> None:
    ml = await factory.open_impl(NAME, ManagedLedgerConfig(max_segment_size=1024))
    c = await ml.open_cursor("s", InitialPosition.EARLIEST)
    # The "publish time" is in the first 8 bytes; storage never parses it itself.
    positions = [
        await ml.add_entry(struct.pack(">Q", 1000 + 10 * i) + b"x" * 200) for i in range(40)
    ]

    def publish_time(e: Entry) -> int:
        return int(struct.unpack(">Q", e.data[:8])[0])

    found = await c.find_newest_matching(lambda e: publish_time(e) <= 1205)
    assert found == positions[20]
    assert await c.find_newest_matching(lambda e: publish_time(e) <= 5) is None
    assert await c.find_newest_matching(lambda e: True) == positions[-1]
    c.mark_delete(positions[30])
    assert await c.find_newest_matching(lambda e: publish_time(e) <= 1205) is None
    assert (
        await c.find_newest_matching(lambda e: publish_time(e) <= 1205, from_first_entry=True)
        == positions[20]
    )


async def test_read_entries_or_wait(factory: FileManagedLedgerFactory) -> None:
    ml, _ = await _ledger_with(factory, 1)
    c = await ml.open_cursor("s")
    reader = asyncio.ensure_future(c.read_entries_or_wait(10))
    await asyncio.sleep(0.01)
    assert not reader.done()
    new = await ml.add_entry(b"n")
    assert [e.position for e in await asyncio.wait_for(reader, 1)] == [new]
    # Cancelling the wait leaves the cursor usable and unchanged.
    reader = asyncio.ensure_future(c.read_entries_or_wait(10))
    await asyncio.sleep(0.01)
    reader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reader
    assert c.read_position == ml.next_position(new)
    # Closing the cursor fails a pending wait.
    reader = asyncio.ensure_future(c.read_entries_or_wait(10))
    await asyncio.sleep(0.01)
    await c.close()
    with pytest.raises(CursorClosed):
        await reader


async def test_one_read_at_a_time(open_factory: OpenFactory) -> None:
    ml, p = await _ledger_with(await open_factory(entry_cache_size=0), 5)
    c = await ml.open_cursor("s", InitialPosition.EARLIEST)
    first = asyncio.ensure_future(c.read_entries(1))
    await asyncio.sleep(0)
    with pytest.raises(ConcurrentReadError):
        await c.read_entries(1)
    assert [e.position for e in await first] == [p[0]]


async def test_seek_during_a_read_wins(open_factory: OpenFactory) -> None:
    ml, p = await _ledger_with(await open_factory(entry_cache_size=0), 5)
    c = await ml.open_cursor("s", InitialPosition.EARLIEST)
    reading = asyncio.ensure_future(c.read_entries(3))
    await asyncio.sleep(0)
    c.seek(p[1])
    await reading
    assert c.read_position == p[1]


async def test_non_durable_cursor(factory: FileManagedLedgerFactory) -> None:
    """SEM-5.6: readers keep their cursor in memory, start inclusive or not."""
    ml, p = await _ledger_with(factory, 5)
    exclusive = ml.new_non_durable_cursor(p[1])
    inclusive = ml.new_non_durable_cursor(p[1], inclusive=True)
    earliest = ml.new_non_durable_cursor(EARLIEST)
    latest = ml.new_non_durable_cursor(LATEST, name="reader-x")
    assert [e.position for e in await exclusive.read_entries(2)] == [p[2], p[3]]
    assert [e.position for e in await inclusive.read_entries(1)] == [p[1]]
    assert [e.position for e in await earliest.read_entries(1)] == [p[0]]
    assert await latest.read_entries(1) == []
    assert not latest.is_durable
    assert ml.get_cursor("reader-x") is latest
    with pytest.raises(CursorAlreadyExists):
        ml.new_non_durable_cursor(LATEST, name="reader-x")
    with pytest.raises(CursorAlreadyExists):
        await ml.open_cursor("reader-x")
    await latest.close()
    assert ml.get_cursor("reader-x") is None
    await ml.close()
    ml = await factory.open_impl(NAME)
    assert [c.name for c in ml.cursors] == []


async def test_delete_cursor_removes_its_state(factory: FileManagedLedgerFactory) -> None:
    ml, p = await _ledger_with(factory, 3)
    c = await ml.open_cursor("s", InitialPosition.EARLIEST)
    c.mark_delete(p[1])
    await ml.delete_cursor("s")
    assert ml.get_cursor("s") is None
    with pytest.raises(CursorClosed):
        c.mark_delete(p[2])
    again = await ml.open_cursor("s", InitialPosition.EARLIEST)
    assert again.backlog_entries == 3
    await ml.delete_cursor("absent")


async def test_cursor_names_with_odd_characters(factory: FileManagedLedgerFactory) -> None:
    ml, p = await _ledger_with(factory, 2)
    c = await ml.open_cursor("a/b %2F c", InitialPosition.EARLIEST)
    c.mark_delete(p[0])
    await ml.close()
    ml = await factory.open_impl(NAME)
    restored = ml.get_cursor("a/b %2F c")
    assert restored is not None and restored.mark_delete_position == p[0]
