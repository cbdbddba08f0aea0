"""Multi-topic and pattern subscriptions through the official client
(issue 9): GET_TOPICS_OF_NAMESPACE by mode and pattern, topic lists across
namespaces, regex consumers by mode, and what periodic discovery sees."""

from __future__ import annotations

import re
import uuid

import pulsar
import pytest

from magnetar.proto import pulsar_api_pb2 as pb
from tests.integration.broker.harness import BrokerThread, RawClient, http_call
from tests.support.official import official_client

T = pb.BaseCommand
Mode = pb.CommandGetTopicsOfNamespace
Response = pb.CommandGetTopicsOfNamespaceResponse


def _drain(consumer: pulsar.Consumer, count: int) -> list[tuple[str, bytes]]:
    got = []
    for _ in range(count):
        msg = consumer.receive(timeout_millis=10000)
        got.append((msg.topic_name(), msg.data()))
        consumer.acknowledge(msg)
    return got


def test_topics_of_namespace_by_mode_pattern_and_hash(broker: BrokerThread) -> None:
    tag = uuid.uuid4().hex[:6]
    persistent = f"persistent://public/default/list-{tag}-a"
    partitioned = f"persistent://public/default/list-{tag}-p"
    non_persistent = f"non-persistent://public/default/list-{tag}-n"
    url = f"{broker.http_url}/admin/v2/persistent/public/default/list-{tag}-p/partitions"
    assert http_call("PUT", url, 2)[0] == 204
    with official_client(broker.url) as client:
        client.create_producer(persistent)
        client.create_producer(non_persistent)
        with RawClient.for_broker(broker) as raw:
            raw.connect()

            def ask(
                mode: int, pattern: str = "", digest: str = ""
            ) -> pb.CommandGetTopicsOfNamespaceResponse:
                raw.send(
                    Mode(
                        request_id=raw.request_id(),
                        namespace="public/default",
                        mode=mode,  # type: ignore[arg-type]
                        topics_pattern=pattern,
                        topics_hash=digest,
                    )
                )
                frame = raw.expect(T.GET_TOPICS_OF_NAMESPACE_RESPONSE)
                return frame.command.getTopicsOfNamespaceResponse

            pattern = f"persistent://public/default/list-{tag}-.*"
            everything = ask(Mode.ALL, pattern)
            assert everything.filtered
            assert sorted(everything.topics) == sorted(
                [
                    persistent,
                    non_persistent,
                    f"{partitioned}-partition-0",
                    f"{partitioned}-partition-1",
                ]
            )
            assert set(ask(Mode.NON_PERSISTENT, pattern).topics) == {non_persistent}
            durable = ask(Mode.PERSISTENT, pattern)
            assert non_persistent not in durable.topics and persistent in durable.topics
            again = ask(Mode.PERSISTENT, pattern, durable.topics_hash)
            assert (again.changed, list(again.topics)) == (False, [])
            status, listed = http_call(
                "GET", f"{broker.http_url}/admin/v2/namespaces/public/default/topics?mode=ALL"
            )
            assert status == 200 and non_persistent in listed and persistent in listed
            raw.send(Mode(request_id=raw.request_id(), namespace="nowhere/ns"))
            error = raw.expect(T.ERROR).command.error
            assert error.error == pb.ServerError.TopicNotFound


def test_topic_list_across_namespaces(broker: BrokerThread) -> None:
    tag = uuid.uuid4().hex[:6]
    assert http_call("PUT", f"{broker.http_url}/admin/v2/namespaces/public/other-{tag}")[0] == 204
    topics = [f"persistent://public/default/tl-{tag}", f"persistent://public/other-{tag}/tl"]
    with official_client(broker.url) as client:
        consumer = client.subscribe(topics, "s")
        for topic in topics:
            client.create_producer(topic).send(topic.encode())
        got = _drain(consumer, 2)
        assert sorted(got) == sorted((t, t.encode()) for t in topics)


def test_regex_consumers_by_subscription_mode(broker: BrokerThread) -> None:
    """A regex over persistent and non-persistent topics, per RegexSubscriptionMode."""
    tag = uuid.uuid4().hex[:6]
    durable = [f"persistent://public/default/rx-{tag}-{i}" for i in (1, 2)]
    volatile = f"non-persistent://public/default/rx-{tag}-3"
    outside = f"persistent://public/default/no-rx-{tag}"
    Mode_ = pulsar.RegexSubscriptionMode
    with official_client(broker.url) as client:
        producers = {t: client.create_producer(t) for t in [*durable, volatile, outside]}
        pattern = re.compile(f"public/default/rx-{tag}-.*")
        every = client.subscribe(pattern, "all", regex_subscription_mode=Mode_.AllTopics)
        only_durable = client.subscribe(
            pattern, "durable", regex_subscription_mode=Mode_.PersistentOnly
        )
        for topic, producer in producers.items():
            producer.send(topic.encode())
        assert {t for t, _ in _drain(every, 3)} == {*durable, volatile}
        assert {t for t, _ in _drain(only_durable, 2)} == set(durable)
        for consumer in (every, only_durable):
            with pytest.raises(pulsar.Timeout):
                consumer.receive(timeout_millis=200)


def test_new_topic_changes_the_listed_hash(broker: BrokerThread) -> None:
    """What a pattern consumer's periodic discovery sees: a topic created after
    the first listing appears, with a new hash (the official Python client
    polls every 60 s and does not let its period be set, so the poll itself is
    driven here)."""
    tag = uuid.uuid4().hex[:6]
    pattern = f"persistent://public/default/disc-{tag}-.*"
    with RawClient.for_broker(broker) as raw, official_client(broker.url) as client:
        raw.connect()
        client.create_producer(f"persistent://public/default/disc-{tag}-1")

        def ask(digest: str) -> Response:
            raw.send(
                Mode(
                    request_id=raw.request_id(),
                    namespace="public/default",
                    topics_pattern=pattern,
                    topics_hash=digest,
                )
            )
            frame = raw.expect(T.GET_TOPICS_OF_NAMESPACE_RESPONSE)
            return frame.command.getTopicsOfNamespaceResponse

        first = ask("")
        assert list(first.topics) == [f"persistent://public/default/disc-{tag}-1"]
        assert not ask(first.topics_hash).changed
        client.create_producer(f"persistent://public/default/disc-{tag}-2")
        second = ask(first.topics_hash)
        assert second.changed and second.topics_hash != first.topics_hash
        assert len(second.topics) == 2
