"""MessageId.serialize()/deserialize() are byte-compatible with the official client."""

from __future__ import annotations

import pulsar
import pytest
from hypothesis import given, settings, strategies as st

from magnetar.proto.ids import INT64_MAX, MessageId

pytestmark = pytest.mark.official

ledger_or_entry = st.integers(-1, INT64_MAX)
partition = st.integers(-1, 2**31 - 1)
batch_index = st.integers(-1, 100_000)

NAMED = [
    pytest.param(MessageId.earliest, pulsar.MessageId.earliest, id="earliest"),
    pytest.param(MessageId.latest, pulsar.MessageId.latest, id="latest"),
    pytest.param(MessageId(5, 7), pulsar.MessageId(-1, 5, 7, -1), id="plain"),
    pytest.param(MessageId(5, 7, 3), pulsar.MessageId(3, 5, 7, -1), id="partitioned"),
    pytest.param(MessageId(5, 7, -1, 2), pulsar.MessageId(-1, 5, 7, 2), id="batch"),
    pytest.param(MessageId(5, 7, 3, 2), pulsar.MessageId(3, 5, 7, 2), id="partitioned-batch"),
    pytest.param(MessageId(0, 0), pulsar.MessageId(-1, 0, 0, -1), id="first"),
]


def _fields(official: object) -> tuple[int, int, int, int]:
    o: pulsar.MessageId = official
    return (o.ledger_id(), o.entry_id(), o.partition(), o.batch_index())


@pytest.mark.parametrize(("ours", "official"), NAMED)
def test_named_ids_serialize_identically(ours: MessageId, official: pulsar.MessageId) -> None:
    assert ours.serialize() == official.serialize()
    assert MessageId.deserialize(official.serialize()) == ours
    assert _fields(pulsar.MessageId.deserialize(ours.serialize())) == _fields(official)
    assert str(ours) == str(official)


@settings(max_examples=200, deadline=None)
@given(ledger=ledger_or_entry, entry=ledger_or_entry, part=partition, index=batch_index)
def test_official_to_ours(ledger: int, entry: int, part: int, index: int) -> None:
    raw = pulsar.MessageId(part, ledger, entry, index).serialize()
    ours = MessageId.deserialize(raw)
    assert (ours.ledger_id, ours.entry_id, ours.partition, ours.batch_index) == (
        ledger,
        entry,
        part,
        index,
    )
    assert ours.serialize() == raw


@settings(max_examples=200, deadline=None)
@given(ledger=ledger_or_entry, entry=ledger_or_entry, part=partition, index=batch_index)
def test_ours_to_official(ledger: int, entry: int, part: int, index: int) -> None:
    raw = MessageId(ledger, entry, part, index).serialize()
    official = pulsar.MessageId.deserialize(raw)
    assert _fields(official) == (ledger, entry, part, index)
    assert official.serialize() == raw


def test_batch_size_survives_the_official_client() -> None:
    """batch_size (field 6) is kept by the official client's round trip."""
    raw = MessageId(9, 4, -1, 3, batch_size=10).serialize()
    assert pulsar.MessageId.deserialize(raw).serialize() == raw
    assert MessageId.deserialize(raw).batch_size == 10
