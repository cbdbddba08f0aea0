"""serialize_many() gives each id's serialize() bytes (the MessageIdData
protobuf), on its fast path and off it."""

from __future__ import annotations

from hypothesis import given, strategies as st

from magnetar.proto.ids import INT64_MAX, MessageId, serialize_many

# Around each varint length boundary, and the signed extremes.
EDGES = [0, 1, 127, 128, 16_383, 16_384, 2_097_151, 2_097_152, 2**35, INT64_MAX, -1, -2]

ids = st.builds(
    MessageId,
    st.sampled_from(EDGES) | st.integers(-(2**63), INT64_MAX),
    st.sampled_from(EDGES) | st.integers(-(2**63), INT64_MAX),
    st.sampled_from([-1, 0, 3, 2**31 - 1, -2]),
    st.sampled_from([-1, 0, 999]),
    st.sampled_from([0, 1, 200]),
)


@given(st.lists(ids, max_size=20))
def test_any_ids_serialize_as_one_at_a_time(given_ids: list[MessageId]) -> None:
    assert serialize_many(given_ids) == [msg_id.serialize() for msg_id in given_ids]


@given(
    st.sampled_from(EDGES[:10]),
    st.sampled_from([-1, 0, 5, 2**31 - 1]),
    st.lists(st.sampled_from(EDGES[:10]) | st.integers(0, INT64_MAX), min_size=1, max_size=30),
)
def test_a_readers_run_of_entries_serializes_as_one_at_a_time(
    ledger: int, partition: int, entries: list[int]
) -> None:
    """The fast path: whole entries of one ledger and partition."""
    run = [MessageId(ledger, entry, partition) for entry in entries]
    assert serialize_many(run) == [msg_id.serialize() for msg_id in run]


def test_a_run_with_a_stranger_in_it() -> None:
    run = [MessageId(7, 1, 2), MessageId(8, 2, 2), MessageId(7, 3, 2, 4, 10), MessageId(7, 4, 1)]
    assert serialize_many(run) == [msg_id.serialize() for msg_id in run]
    assert serialize_many([]) == []
