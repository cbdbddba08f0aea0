"""A SIGKILL in the middle of compaction (issue 16): after the restart a
read_compacted reader sees the previous view (then the raw topic after its
horizon) or the new one, never a mix."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

from tests.integration.broker.test_broker_compaction import compact_and_wait, read_all
from tests.support.brokers import BrokerProcess
from tests.support.http_calls import http_call
from tests.support.official import official_client

TOPIC = "persistent://public/default/compact-crash"
KEYS = 100


@pytest.fixture
def process(tmp_path: Path) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(tmp_path / "data", tmp_path / "broker.log")
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def _publish(client: Any, count: int, tag: str) -> list[tuple[str, bytes]]:
    producer = client.create_producer(
        TOPIC, batching_enabled=True, batching_max_messages=100, block_if_queue_full=True
    )
    sent = []
    for i in range(count):
        key, value = f"k{i % KEYS}", f"{tag}{i}".encode()
        producer.send_async(value, None, partition_key=key)
        sent.append((key, value))
    producer.flush()
    producer.close()
    return sent


def _latest(messages: list[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
    return sorted(dict(messages).items())


@pytest.mark.parametrize("wait_for_running", [False, True])
def test_sigkill_during_compaction_leaves_old_or_new_view(
    process: BrokerProcess, wait_for_running: bool
) -> None:
    with official_client(process.url) as client:
        # A durable subscription keeps the raw entries from being trimmed.
        client.subscribe(TOPIC, "keep", initial_position=pulsar.InitialPosition.Earliest).close()
        first = _publish(client, 5_000, "a")
        assert compact_and_wait(process, TOPIC)["status"] == "SUCCESS"
        second = _publish(client, 20_000, "b")
    url = f"{process.http_url}/admin/v2/persistent/public/default/compact-crash/compaction"
    assert http_call("PUT", url)[0] == 204
    if wait_for_running:
        while http_call("GET", url)[1]["status"] == "NOT_RUN":
            time.sleep(0.001)
    process.kill()
    process.start()
    with official_client(process.url) as client:
        seen = sorted(read_all(client, TOPIC, compacted=True))
    old_view = sorted(_latest(first) + second)  # the old view, then the raw tail
    new_view = _latest(first + second)
    assert seen in (old_view, new_view)
