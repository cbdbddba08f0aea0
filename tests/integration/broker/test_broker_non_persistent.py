"""Non-persistent topics (issue 9): dispatch or drop, no storage, unique ids,
every subscription type, through the official client."""

from __future__ import annotations

import uuid

import pulsar
import pytest

from magnetar.proto import pulsar_api_pb2 as pb
from tests.support.brokers import BrokerThread
from tests.support.official import official_client
from tests.support.raw_client import RawClient

T = pb.BaseCommand


def _topic() -> str:
    return f"non-persistent://public/default/np-{uuid.uuid4().hex[:8]}"


def test_delivered_to_each_subscription_with_unique_ids(broker: BrokerThread) -> None:
    topic = _topic()
    with official_client(broker.url) as client:
        exclusive = client.subscribe(topic, "ex")
        shared = [
            client.subscribe(topic, "sh", consumer_type=pulsar.ConsumerType.Shared)
            for _ in range(2)
        ]
        failover = client.subscribe(topic, "fo", consumer_type=pulsar.ConsumerType.Failover)
        producer = client.create_producer(topic, batching_enabled=False)
        sent = [f"m{i}".encode() for i in range(20)]
        ids = [producer.send(body) for body in sent]
        assert len({str(i) for i in ids}) == 20
        for consumer in (exclusive, failover):
            got = [consumer.receive(timeout_millis=5000).data() for _ in sent]
            assert got == sent
        spread: list[bytes] = []
        counts = []
        for consumer in shared:
            mine = []
            while True:
                try:
                    mine.append(consumer.receive(timeout_millis=300).data())
                except pulsar.Timeout:
                    break
            counts.append(len(mine))
            spread.extend(mine)
        assert sorted(spread) == sorted(sent)
        assert all(counts), counts


def test_dropped_without_permits_and_nothing_stored(broker: BrokerThread) -> None:
    """A consumer without permits misses what is published meanwhile: it is
    dropped and counted, not kept; a later subscription sees no backlog."""
    topic = _topic()
    with RawClient.for_broker(broker) as client, RawClient.for_broker(broker) as producer:
        client.connect()
        producer.connect()
        client.subscribe(topic, "s", 1, pb.CommandSubscribe.Exclusive)
        producer.create_producer(topic, producer_id=1)
        client.send(pb.CommandFlow(consumer_id=1, messagePermits=1))
        client.send(pb.CommandPing())
        client.expect(T.PONG)  # the FLOW was handled
        for seq in range(4):
            producer.publish(1, seq, f"m{seq}".encode())
        first = client.expect(T.MESSAGE)
        client.send(pb.CommandFlow(consumer_id=1, messagePermits=1))
        client.send(pb.CommandPing())
        client.expect(T.PONG)
        producer.publish(1, 4, b"after flow")
        second = client.expect(T.MESSAGE)
        assert first.payload is not None and second.payload is not None
        assert [first.payload.payload, second.payload.payload] == [b"m0", b"after flow"]
        assert broker.call(_dropped(broker, topic)) == 3
    with official_client(broker.url) as official:
        late = official.subscribe(topic, "late", initial_position=pulsar.InitialPosition.Earliest)
        with pytest.raises(pulsar.Timeout):
            late.receive(timeout_millis=300)


async def _dropped(broker: BrokerThread, topic: str) -> int:
    assert broker.server is not None and broker.server.service is not None
    loaded = broker.server.service.topics[topic]
    return sum(s.stats().msg_dropped for s in loaded.subscriptions.values())


def test_read_compacted_is_not_allowed(broker: BrokerThread) -> None:
    """Pulsar refuses readCompacted on a non-persistent topic (nothing is kept
    to compact) with NotAllowed; the official client's table view, which
    reads compacted, fails on one at once (the C++ suite's
    TableViewTest.testNotSupportNonPersistentTopic)."""
    topic = _topic()
    with RawClient.for_broker(broker) as raw:
        raw.connect()
        raw.send(
            pb.CommandSubscribe(
                topic=topic,
                subscription="s",
                subType=pb.CommandSubscribe.Exclusive,
                consumer_id=1,
                request_id=1,
                read_compacted=True,
            )
        )
        error = raw.expect(T.ERROR).command.error
        assert error.error == pb.ServerError.NotAllowedError
    with official_client(broker.url) as client:
        with pytest.raises(pulsar.PulsarException, match="NotAllowed"):
            client.create_table_view(topic)
        client.subscribe(topic, "plain").close()
