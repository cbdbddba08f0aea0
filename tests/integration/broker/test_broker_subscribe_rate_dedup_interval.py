"""subscribeRate and deduplicationSnapshotInterval at topic level over the
namespace's value (issue 43), through the real path: the admin REST call,
then the official client against the broker. A sibling topic of the same
namespace shows the namespace's value still holds."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

from tests.support.brokers import BrokerProcess, BrokerThread
from tests.support.http_calls import http_call
from tests.support.official import official_client

DEDUP_CURSOR = "pulsar.dedup"


def _namespace(http_url: str, **policies: Any) -> str:
    ns = f"sr-{uuid.uuid4().hex[:6]}"
    base = f"{http_url}/admin/v2/namespaces/public/{ns}"
    assert http_call("PUT", base) == (204, None)
    for path, value in policies.items():
        assert http_call("POST", f"{base}/{path}", value) == (204, None), path
    return ns


def _topic_url(http_url: str, topic: str) -> str:
    return f"{http_url}/admin/v2/{topic.replace('://', '/')}"


def test_topic_subscribe_rate_over_the_namespace(broker: BrokerThread) -> None:
    """subscribeRate 2 per 60 s on one topic: the third SUBSCRIBE of the same
    consumer (host, name, id) within the period is refused with NotAllowed,
    which the official client fails fast on; the sibling, under the
    namespace's 10 per 60 s, takes all three. Each attempt is a new client
    (its first consumer has id 0), as a restarting process would be."""
    ns = _namespace(
        broker.http_url,
        subscribeRate={"subscribeThrottlingRatePerConsumer": 10, "ratePeriodInSecond": 60},
    )
    limited, sibling = f"persistent://public/{ns}/limited", f"persistent://public/{ns}/sibling"
    topic_rate = {"subscribeThrottlingRatePerConsumer": 2, "ratePeriodInSecond": 60}
    url = f"{_topic_url(broker.http_url, limited)}/subscribeRate"
    assert http_call("POST", url, topic_rate) == (204, None)
    assert http_call("GET", f"{url}?applied=true") == (200, topic_rate)

    def subscribe(topic: str, name: str = "worker") -> None:
        # A refusal retried would take the whole operation timeout.
        with official_client(broker.url, operation_timeout_seconds=30) as client:
            client.subscribe(topic, "sub", consumer_name=name).close()

    for _ in range(3):
        subscribe(sibling)
    subscribe(limited)
    subscribe(limited)
    started = time.monotonic()
    with pytest.raises(pulsar.NotAllowedError):
        subscribe(limited)
    assert time.monotonic() - started < 10, "the refusal was retried, not failed fast"
    subscribe(limited, "another-worker")  # another consumer has its own quota
    # Removed at topic level, the namespace's 10 apply (a new limiter).
    assert http_call("DELETE", url) == (204, None)
    subscribe(limited)


@pytest.fixture
def process(tmp_path: Path) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(
        tmp_path / "data",
        tmp_path / "broker.log",
        broker_deduplication_enabled=True,
        dedup_snapshot_interval_entries=100_000,
    )
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def _dedup_cursor(broker: BrokerProcess, topic: str) -> dict[str, Any]:
    code, stats = http_call("GET", f"{_topic_url(broker.http_url, topic)}/internalStats")
    assert code == 200, stats
    cursor: dict[str, Any] = stats["cursors"][DEDUP_CURSOR]
    return cursor


def _entries(broker: BrokerProcess, topic: str) -> int:
    stats = http_call("GET", f"{_topic_url(broker.http_url, topic)}/internalStats")[1]
    return int(stats["numberOfEntries"])


def test_topic_dedup_snapshot_interval_over_the_namespace(process: BrokerProcess) -> None:
    """deduplicationSnapshotInterval 1 s on one topic, the entry interval out
    of reach: its dedup cursor takes the producer's last sequence id within
    seconds, while the sibling under the namespace's 3600 s does not. After
    a SIGKILL and a restart the snapshot is there, and both topics (the
    sibling by replaying every entry) know the producer's last sequence id
    and drop a resent message. (The timed topic's entries may be trimmed by
    then: its snapshot's mark-delete covers them and nothing else holds them,
    so its state comes from the snapshot alone.)"""
    broker = process
    ns = _namespace(broker.http_url, deduplicationSnapshotInterval=3600)
    timed, sibling = f"persistent://public/{ns}/timed", f"persistent://public/{ns}/sibling"
    url = f"{_topic_url(broker.http_url, timed)}/deduplicationSnapshotInterval"
    assert http_call("POST", url, 1) == (204, None)
    assert http_call("GET", f"{url}?applied=true") == (200, 1)
    with official_client(broker.url) as client:
        for topic in (timed, sibling):
            producer = client.create_producer(
                topic, producer_name=f"p-{topic[-5:]}", batching_enabled=False
            )
            for i in range(5):
                producer.send(b"m%d" % i)
            producer.close()
    deadline = time.monotonic() + 10
    while _dedup_cursor(broker, timed)["properties"] == {} and time.monotonic() < deadline:
        time.sleep(0.1)
    snapshot = _dedup_cursor(broker, timed)
    assert snapshot["properties"] == {"p-timed": 4}
    stats = http_call("GET", f"{_topic_url(broker.http_url, timed)}/internalStats")[1]
    assert snapshot["markDeletePosition"] == stats["lastConfirmedEntry"]
    time.sleep(1.5)  # another interval: the sibling has still taken none
    assert _dedup_cursor(broker, sibling)["properties"] == {}

    broker.kill()  # the cursor persisted its snapshot within a second of it
    broker.start()
    assert _dedup_cursor(broker, timed)["properties"] == {"p-timed": 4}
    assert _dedup_cursor(broker, sibling)["properties"] == {}
    with official_client(broker.url) as client:
        for topic in (timed, sibling):
            name = f"p-{topic[-5:]}"
            producer = client.create_producer(topic, producer_name=name, batching_enabled=False)
            assert producer.last_sequence_id() == 4, topic
            stored = _entries(broker, topic)
            producer.send(b"m3", sequence_id=3)  # a resend: dropped
            assert _entries(broker, topic) == stored, topic
            producer.send(b"m5", sequence_id=5)
            assert _entries(broker, topic) == stored + 1, topic
            producer.close()
