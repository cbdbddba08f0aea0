"""A topic loaded when its LOOKUP or PARTITIONED_METADATA is answered
(broker/service/prefetch.py): the load runs while the client gets ready to
attach, and creates nothing on its own, as neither creates a topic in
Pulsar."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from magnetar.broker.service import prefetch
from magnetar.broker.storage import FileManagedLedgerFactory
from magnetar.broker.topics.persistent import ledger_name
from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.naming import TopicName
from tests.support.brokers import BrokerThread
from tests.support.http_calls import http_call
from tests.support.polling import eventually
from tests.support.raw_client import RawClient

T = pb.BaseCommand


def _topic() -> str:
    return f"persistent://public/default/ahead-{uuid.uuid4().hex[:8]}"


def _lookup(client: RawClient, topic: str) -> None:
    client.send(pb.CommandLookupTopic(topic=topic, request_id=client.request_id()))
    answer = client.expect(T.LOOKUP_RESPONSE).command.lookupTopicResponse
    assert answer.response == pb.CommandLookupTopicResponse.Connect


def _listed(broker: BrokerThread, topic: str) -> bool:
    status, names = http_call("GET", f"{broker.http_url}/admin/v2/persistent/public/default")
    assert status == 200, names
    return topic in names


def _held(broker: BrokerThread) -> int:
    assert broker.server is not None and broker.server.service is not None
    return len(broker.server.service.prefetch._held)


def _partitioned_metadata(client: RawClient, topic: str) -> None:
    client.send(pb.CommandPartitionedTopicMetadata(topic=topic, request_id=client.request_id()))
    answer = client.expect(T.PARTITIONED_METADATA_RESPONSE).command.partitionMetadataResponse
    assert answer.partitions == 0


@pytest.mark.parametrize("ask", [_lookup, _partitioned_metadata])
def test_a_lookup_alone_creates_no_topic(
    broker: BrokerThread, monkeypatch: pytest.MonkeyPatch, ask: Callable[[RawClient, str], None]
) -> None:
    """The topic loaded for a LOOKUP (or a PARTITIONED_METADATA that finds
    it not partitioned) is not listed, nothing of it is stored, and it is
    dropped when no client comes within HOLD_S."""
    monkeypatch.setattr(prefetch, "HOLD_S", 0.3)
    topic = _topic()
    with RawClient.for_broker(broker) as client:
        client.connect()
        ask(client, topic)
        eventually("the topic loaded ahead", lambda: _held(broker) == 1)
        assert not _listed(broker, topic)
        eventually("the topic dropped", lambda: _held(broker) == 0)
    assert broker.server is not None and broker.server.service is not None
    service = broker.server.service
    assert topic not in service.topics
    name = ledger_name(TopicName.parse(topic))
    assert not broker.call(service.factory.exists(name))
    assert isinstance(service.factory, FileManagedLedgerFactory)
    assert name not in service.factory.open_ledgers
    assert not _listed(broker, topic)


def test_a_subscribe_that_may_not_create_finds_no_topic_after_a_lookup(
    broker: BrokerThread,
) -> None:
    """SUBSCRIBE with force_topic_creation false (a pattern consumer's) on a
    topic that does not exist is refused, LOOKUP or not; with it true, and
    for a PRODUCER, the looked-up topic is created."""
    topic = _topic()
    with RawClient.for_broker(broker) as client:
        client.connect()
        _lookup(client, topic)
        client.send(
            pb.CommandSubscribe(
                topic=topic,
                subscription="s",
                subType=pb.CommandSubscribe.Shared,
                consumer_id=1,
                request_id=client.request_id(),
                force_topic_creation=False,
            )
        )
        error = client.expect(T.ERROR).command.error
        assert error.error == pb.TopicNotFound, error.message
        assert not _listed(broker, topic)
        _lookup(client, topic)
        client.create_producer(topic, producer_id=1)
        assert client.publish(1, 0, b"kept").message_id.entryId == 0
    assert _listed(broker, topic)
    assert _held(broker) == 0


def test_the_warm_up_at_start_leaves_no_topic(broker: BrokerThread) -> None:
    """A standalone broker loads a few new topics ahead at start and drops
    them (prefetch.warm_up): each load ran, and none of them is listed,
    stored or open."""
    assert broker.server is not None and broker.server.service is not None
    service = broker.server.service
    assert service.prefetch.warmed == prefetch.WARM_UP_LOADS
    factory = service.factory
    assert isinstance(factory, FileManagedLedgerFactory)
    for i in range(prefetch.WARM_UP_LOADS):
        topic = f"persistent://{prefetch.WARM_UP_NAMESPACE}/{prefetch.WARM_UP_PREFIX}{i}"
        name = ledger_name(TopicName.parse(topic))
        assert topic not in service.topics
        assert not broker.call(factory.exists(name))
        assert name not in factory.open_ledgers
        assert not _listed(broker, topic)
