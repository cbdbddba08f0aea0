"""Batch containers and partition routers: pure logic, no sockets."""

from __future__ import annotations

import random

import pytest

from magnetar.client.aio.config import ProducerConfiguration
from magnetar.client.aio.enums import PartitionsRoutingMode
from magnetar.client.aio.errors import InvalidConfiguration
from magnetar.client.aio.message import OutgoingMessage
from magnetar.client.aio.producer.batch import BatchContainer, KeyBasedBatchContainer
from magnetar.client.aio.producer.routing import Router
from magnetar.proto import messages
from magnetar.proto.hashes import HashingScheme, partition_for_key


def test_default_batch_round_trips_through_the_batch_format() -> None:
    """SEM-8.3: [u32 size][SingleMessageMetadata][payload] per message, in order."""
    container = BatchContainer(10, 10_000)
    sent = [
        OutgoingMessage(b"a", properties={"k": "v"}, partition_key="p"),
        OutgoingMessage(b"", null_value=True),
        OutgoingMessage(b"ccc", ordering_key=b"o", event_time=7),
    ]
    for seq, msg in enumerate(sent, start=5):
        container.add(msg, seq, None)
    (batch,) = container.drain()
    assert container.is_empty
    assert (batch.sequence_id, batch.highest_sequence_id, batch.num_messages) == (5, 7, 3)
    parsed = messages.split_batch(batch.data, 3)
    assert [payload for _, payload in parsed] == [b"a", b"", b"ccc"]
    first, second, third = (meta for meta, _ in parsed)
    assert messages.properties(first) == {"k": "v"} and first.partition_key == "p"
    assert second.null_value
    assert third.ordering_key == b"o" and third.event_time == 7
    assert [meta.sequence_id for meta, _ in parsed] == [5, 6, 7]


def test_batch_limits() -> None:
    container = BatchContainer(2, 100)
    assert container.has_room_for(OutgoingMessage(b"x" * 500))  # an empty batch takes anything
    container.add(OutgoingMessage(b"x" * 60), 0, None)
    assert not container.has_room_for(OutgoingMessage(b"y" * 50))
    assert container.has_room_for(OutgoingMessage(b"y" * 40))
    container.add(OutgoingMessage(b"y" * 40), 1, None)
    assert container.is_full()


def test_key_based_batches_one_per_key_in_first_message_order() -> None:
    """SEM-8.3: one batch per key (ordering key first, else partition key)."""
    container = KeyBasedBatchContainer(100, 100_000)
    keys = ["b", "a", "b", None, "a"]
    for seq, key in enumerate(keys):
        container.add(OutgoingMessage(b"%d" % seq, partition_key=key), seq, None)
    container.add(OutgoingMessage(b"5", partition_key="a", ordering_key=b"b"), 5, None)
    batches = container.drain()
    assert [b.first.batch_key() for b in batches] == [b"b", b"a", b""]
    assert [b.num_messages for b in batches] == [3, 2, 1]
    assert messages.split_batch(batches[0].data, 3)[2][1] == b"5"


def _conf(**options: object) -> ProducerConfiguration:
    options.setdefault("batching_enabled", False)
    conf = ProducerConfiguration(**options)  # type: ignore[arg-type]
    conf.validate()
    return conf


def test_keyed_messages_hash_to_a_partition() -> None:
    router = Router(_conf(), 7, rand=random.Random(1))
    for key in ["a", "order-17", "ключ", "x" * 40]:
        assert router.choose(OutgoingMessage(b"", partition_key=key)) == partition_for_key(key, 7)
    java = Router(_conf(hashing_scheme=HashingScheme.JavaStringHash), 7)
    assert java.choose(OutgoingMessage(b"", partition_key="k")) == partition_for_key(
        "k", 7, HashingScheme.JavaStringHash
    )


def test_round_robin_without_batching_cycles_partitions() -> None:
    router = Router(_conf(), 4, rand=random.Random(3))
    picks = [router.choose(OutgoingMessage(b"")) for _ in range(8)]
    assert sorted(picks[:4]) == [0, 1, 2, 3]
    assert picks[4:] == picks[:4]


def test_round_robin_with_batching_sticks_to_a_partition_per_batch() -> None:
    now = [0.0]
    router = Router(
        _conf(batching_enabled=True, batching_max_messages=3, batching_max_publish_delay_ms=10),
        4,
        clock=lambda: now[0],
        rand=random.Random(0),
    )
    picks = [router.choose(OutgoingMessage(b"")) for _ in range(6)]
    assert picks[0] == picks[1] == picks[2] != picks[3] == picks[4] == picks[5]
    now[0] += 0.011  # the batch delay passed: move on
    assert router.choose(OutgoingMessage(b"")) != picks[5]


def test_single_partition_and_custom_routers() -> None:
    single = Router(_conf(message_routing_mode=PartitionsRoutingMode.UseSinglePartition), 5)
    assert len({single.choose(OutgoingMessage(b"")) for _ in range(20)}) == 1
    custom = Router(_conf(message_router=lambda msg, n: len(msg.data()) % n), 5)
    assert custom.choose(OutgoingMessage(b"abc")) == 3
    bad = Router(_conf(message_router=lambda msg, n: n), 5)
    with pytest.raises(InvalidConfiguration):
        bad.choose(OutgoingMessage(b""))
    with pytest.raises(InvalidConfiguration):
        Router(_conf(message_routing_mode=PartitionsRoutingMode.CustomPartition), 5)


def test_batching_and_chunking_together_are_refused() -> None:
    with pytest.raises(InvalidConfiguration, match="can't be enabled together"):
        _conf(batching_enabled=True, chunking_enabled=True)
