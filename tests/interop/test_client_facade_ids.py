"""The blocking facade: send's argument checks, and message ids that keep
their topic so a multi-topic consumer can acknowledge them (SEM-3: acks)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from magnetar import client as magnetar
from tests.interop.conftest import BrokerUnderTest

pytestmark = pytest.mark.lite


@pytest.mark.parametrize(
    "kwargs",
    [
        {"properties": "x"},
        {"partition_key": 5},
        {"sequence_id": "1"},
        {"replication_clusters": "a"},
        {"disable_replication": "no"},
        {"event_timestamp": "1"},
        {"deliver_at": "1"},
        {"deliver_after": 5},
    ],
    ids=lambda kw: next(iter(kw)),
)
def test_send_refuses_keywords_of_the_wrong_type(
    ours: magnetar.Client, broker: BrokerUnderTest, kwargs: dict[str, Any]
) -> None:
    producer = ours.create_producer(broker.topic("send-checks"))
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        producer.send(b"x", **kwargs)
    with pytest.raises(TypeError):
        producer.send(5)
    producer.send(b"x", deliver_after=timedelta(milliseconds=1))


def test_a_deserialized_id_with_its_topic_acks_on_a_multi_topic_consumer(
    ours: magnetar.Client, broker: BrokerUnderTest
) -> None:
    """Ids serialized, then deserialized with their topic, acknowledge
    cumulatively on each topic of a multi-topic consumer: a new consumer of
    the subscription gets only what came after."""
    topics = [broker.topic("ids-a"), broker.topic("ids-b")]
    consumer = ours.subscribe(topics, "sub")
    producers = [ours.create_producer(t) for t in topics]
    for producer, topic in zip(producers, topics, strict=True):
        producer.send(topic.encode())
    saved = {}
    for _ in topics:
        msg = consumer.receive(10000)
        assert msg.message_id().topic == msg.topic_name()
        saved[msg.topic_name()] = msg.message_id().serialize()
    for topic, data in saved.items():
        consumer.acknowledge_cumulative(magnetar.MessageId.deserialize(data, topic=topic))
    consumer.close()
    consumer = ours.subscribe(topics, "sub")
    producers[0].send(b"after")
    assert consumer.receive(10000).data() == b"after"
    consumer.close()
