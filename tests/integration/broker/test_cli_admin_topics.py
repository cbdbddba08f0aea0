"""More of `magnetar admin` end to end (CLI -> REST -> broker state, checked
through the REST API or a client): tenants, deduplication, partitioned
topics, cursors by id and by time, terminate, peek of compressed batches,
human and JSON output, and usage errors."""

from __future__ import annotations

import json
import time
import uuid

import pulsar
import pytest

from tests.integration.broker.test_cli_admin import _magnetar
from tests.support.brokers import BrokerThread
from tests.support.http_calls import http_call
from tests.support.official import official_client


def test_tenants_dedup_and_topic_lists(broker: BrokerThread) -> None:
    admin = ["admin", "--admin-url", broker.http_url]
    tenant = f"cli-{uuid.uuid4().hex[:6]}"
    assert _magnetar(*admin, "tenants", "create", tenant).returncode == 0
    assert tenant in _magnetar(*admin, "tenants", "list").stdout.split()
    ns = f"{tenant}/ns"
    assert _magnetar(*admin, "namespaces", "create", ns).returncode == 0
    ran = _magnetar(*admin, "namespaces", "set-deduplication", ns, "--enable")
    assert ran.returncode == 0, ran.stderr
    assert http_call("GET", f"{broker.http_url}/admin/v2/namespaces/{ns}/deduplication") == (
        200,
        True,
    )
    topic = f"persistent://{ns}/t"
    assert _magnetar(*admin, "topics", "create", topic).returncode == 0
    ran = _magnetar(*admin, "topics", "create-partitioned-topic", f"{topic}-p", "-p", "3")
    assert ran.returncode == 0, ran.stderr
    path = f"{broker.http_url}/admin/v2/persistent/{ns}/t-p/partitions"
    assert http_call("GET", path)[1]["partitions"] == 3
    listed = _magnetar(*admin, "topics", "list", ns).stdout.split()
    assert topic in listed
    ran = _magnetar(*admin, "--json", "topics", "partitioned-stats", f"{topic}-p")
    assert json.loads(ran.stdout)["metadata"] == {"partitions": 3}
    assert _magnetar(*admin, "topics", "delete", topic).returncode == 0
    assert topic not in _magnetar(*admin, "topics", "list", ns).stdout.split()


def test_cursor_commands_terminate_and_output(broker: BrokerThread) -> None:
    admin = ["admin", "--admin-url", broker.http_url]
    topic = f"persistent://public/default/cli-{uuid.uuid4().hex[:6]}"
    stats_url = f"{broker.http_url}/admin/v2/{topic.replace('://', '/')}/stats"

    def backlog() -> int:
        return int(http_call("GET", stats_url)[1]["subscriptions"]["sub"]["msgBacklog"])

    ran = _magnetar(*admin, "topics", "create-subscription", topic, "-s", "sub", "--earliest")
    assert ran.returncode == 0, ran.stderr
    with official_client(broker.url) as client:
        producer = client.create_producer(topic, batching_enabled=False)
        ids = [producer.send(f"m{i}".encode()) for i in range(5)]
        middle_time = int(time.time() * 1000)
        producer.close()
    assert _magnetar(*admin, "topics", "clear-backlog", topic, "-s", "sub").returncode == 0
    assert backlog() == 0
    # Reset to the third message: it and the two after it are the backlog.
    third = f"{ids[2].ledger_id()}:{ids[2].entry_id()}"
    ran = _magnetar(*admin, "topics", "reset-cursor", topic, "-s", "sub", "--message-id", third)
    assert ran.returncode == 0, ran.stderr
    assert backlog() == 3
    ran = _magnetar(*admin, "topics", "reset-cursor", topic, "-s", "sub", "--time", "0")
    assert ran.returncode == 0 and backlog() == 5
    ran = _magnetar(
        *admin, "topics", "reset-cursor", topic, "-s", "sub", "--time", str(middle_time + 1)
    )
    assert ran.returncode == 0 and backlog() == 0
    ran = _magnetar(*admin, "topics", "reset-cursor", topic, "-s", "sub", "--message-id", "x")
    assert ran.returncode == 2 and "ledgerId:entryId" in ran.stderr
    ran = _magnetar(*admin, "topics", "reset-cursor", topic, "-s", "sub")
    assert ran.returncode == 2

    # Human output by default, JSON with --json.
    human = _magnetar(*admin, "topics", "stats", topic).stdout
    assert "subscriptions:" in human and "msgBacklog: 0" in human
    with pytest.raises(json.JSONDecodeError):
        json.loads(human)
    as_json = json.loads(_magnetar(*admin, "--json", "topics", "stats", topic).stdout)
    assert as_json["subscriptions"]["sub"]["msgBacklog"] == 0
    ran = _magnetar(*admin, "--json", "topics", "last-message-id", topic)
    assert json.loads(ran.stdout)["entryId"] == ids[4].entry_id()

    ran = _magnetar(*admin, "topics", "terminate", topic)
    assert ran.returncode == 0, ran.stderr
    assert f"{ids[4].ledger_id()}:{ids[4].entry_id()}" in ran.stdout
    with official_client(broker.url) as client, pytest.raises(pulsar.TopicTerminated):
        client.create_producer(topic)
    ran = _magnetar(*admin, "topics", "unsubscribe", topic, "-s", "sub")
    assert ran.returncode == 0, ran.stderr
    ran = _magnetar(*admin, "topics", "terminate", "persistent://public/default/none-here")
    assert ran.returncode == 1 and "404" in ran.stderr


def test_peek_splits_compressed_batches(broker: BrokerThread) -> None:
    """A batch of three LZ4-compressed messages from the official client
    peeks as three messages with their batch indexes, keys and bodies."""
    admin = ["admin", "--admin-url", broker.http_url]
    topic = f"persistent://public/default/peek-{uuid.uuid4().hex[:6]}"
    with official_client(broker.url) as client:
        client.subscribe(topic, "sub").close()
        producer = client.create_producer(
            topic,
            compression_type=pulsar.CompressionType.LZ4,
            batching_enabled=True,
            batching_max_publish_delay_ms=1000,
        )
        for i in range(3):
            producer.send_async(f"hello-{i}".encode(), None, partition_key=f"k{i}")
        producer.flush()
        producer.close()
    ran = _magnetar(*admin, "topics", "peek-messages", topic, "-s", "sub")
    assert ran.returncode == 0, ran.stderr
    assert [line.split(": ", 1)[1] for line in ran.stdout.splitlines()] == [
        "hello-0",
        "hello-1",
        "hello-2",
    ]
    assert ran.stdout.splitlines()[1].split(": ")[0].endswith(":1")
    ran = _magnetar(*admin, "--json", "topics", "peek-messages", topic, "-s", "sub")
    keys = [json.loads(line)["key"] for line in ran.stdout.splitlines()]
    assert keys == ["k0", "k1", "k2"]
