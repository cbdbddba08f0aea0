"""Multi-topic and pattern subscriptions through the official client
(issue 9): GET_TOPICS_OF_NAMESPACE by mode and pattern, topic lists across
namespaces, regex consumers by mode, and what periodic discovery sees."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pulsar
import pytest

from magnetar.proto import pulsar_api_pb2 as pb
from tests.support.brokers import BrokerThread
from tests.support.draining import receive_count, topics_and_data
from tests.support.http_calls import http_call
from tests.support.official import official_client
from tests.support.raw_client import RawClient

T = pb.BaseCommand
Mode = pb.CommandGetTopicsOfNamespace
Response = pb.CommandGetTopicsOfNamespaceResponse


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
        got = topics_and_data(receive_count(consumer, 2))
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
        assert {t for t, _ in topics_and_data(receive_count(every, 3))} == {*durable, volatile}
        assert {t for t, _ in topics_and_data(receive_count(only_durable, 2))} == set(durable)
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


def test_regex_consumer_discovers_a_topic_created_later(broker: BrokerThread) -> None:
    """A regex consumer of the official client picks up a topic created after it
    subscribed. The Python wrapper ignores `pattern_auto_discovery_period` (60 s
    fixed), so the consumer is made through its C++ core's configuration with a
    1 s period: the same code path, a shorter poll."""
    import _pulsar

    tag = uuid.uuid4().hex[:6]
    first = f"persistent://public/default/late-{tag}-1"
    later = f"persistent://public/default/late-{tag}-2"
    with official_client(broker.url) as client:
        client.create_producer(first).send(b"early")
        conf = _pulsar.ConsumerConfiguration()
        conf.consumer_type(_pulsar.ConsumerType.Shared)
        conf.pattern_auto_discovery_period(1)
        conf.subscription_initial_position(_pulsar.InitialPosition.Earliest)
        consumer = client._client.subscribe_pattern(f"public/default/late-{tag}-.*", "sub", conf)
        got = consumer.receive(10000)
        assert (got.topic_name(), got.data()) == (first, b"early")
        consumer.acknowledge(got)
        client.create_producer(later).send(b"late")
        got = consumer.receive(10000)  # within a discovery period or two
        assert (got.topic_name(), got.data()) == (later, b"late")
        consumer.acknowledge(got)
        consumer.close()


def test_stored_topics_are_listed_after_a_restart(broker: BrokerThread) -> None:
    """A topic created before a restart is listed (binary protocol and admin
    REST) although nothing has loaded it since; a deleted one is not."""
    tag = uuid.uuid4().hex[:6]
    kept = f"persistent://public/default/stored-{tag}-kept"
    gone = f"persistent://public/default/stored-{tag}-gone"
    with official_client(broker.url) as client:
        client.create_producer(kept).send(b"x")
        client.create_producer(gone).send(b"x")
    gone_url = f"{broker.http_url}/admin/v2/{gone.replace('://', '/')}"
    assert http_call("DELETE", gone_url)[0] == 204
    status, body = http_call("DELETE", gone_url)
    assert status == 404 and "does not exist" in body["reason"]
    broker.restart()
    with RawClient.for_broker(broker) as raw:
        raw.connect()
        raw.send(Mode(request_id=raw.request_id(), namespace="public/default"))
        listed = raw.expect(T.GET_TOPICS_OF_NAMESPACE_RESPONSE).command
    topics = list(listed.getTopicsOfNamespaceResponse.topics)
    assert kept in topics and gone not in topics
    status, body = http_call("GET", f"{broker.http_url}/admin/v2/namespaces/public/default/topics")
    assert status == 200 and kept in body and gone not in body


def test_our_client_lists_a_namespaces_topics(broker: BrokerThread) -> None:
    """Client.get_topics_of_namespace (used by the Spark connector's
    topics_pattern) over the binary protocol and over HTTP lookup: a
    partitioned topic by its partitions, persistent and non-persistent by mode."""
    from magnetar.client import Client, RegexSubscriptionMode
    from magnetar.client.aio.errors import InvalidConfiguration

    tag = uuid.uuid4().hex[:6]
    url = f"{broker.http_url}/admin/v2/persistent/public/default/ours-{tag}-p/partitions"
    assert http_call("PUT", url, 2)[0] == 204
    with official_client(broker.url) as client:
        client.create_producer(f"persistent://public/default/ours-{tag}-a")
        client.create_producer(f"non-persistent://public/default/ours-{tag}-n")
        for service_url in (broker.url, broker.http_url):
            ours = Client(service_url)
            try:
                assert _ours(ours, tag, RegexSubscriptionMode.PersistentOnly) == [
                    f"persistent://public/default/ours-{tag}-a",
                    f"persistent://public/default/ours-{tag}-p-partition-0",
                    f"persistent://public/default/ours-{tag}-p-partition-1",
                ]
                assert _ours(ours, tag, RegexSubscriptionMode.NonPersistentOnly) == [
                    f"non-persistent://public/default/ours-{tag}-n"
                ]
                assert len(_ours(ours, tag, RegexSubscriptionMode.AllTopics)) == 4
                with pytest.raises(InvalidConfiguration, match="not a namespace"):
                    ours.get_topics_of_namespace("public")
            finally:
                ours.close()


def _ours(client: Any, tag: str, mode: Any) -> list[str]:
    return [t for t in client.get_topics_of_namespace("public/default", mode) if f"-{tag}-" in t]
