"""Admin v2 for topics and subscriptions over HTTP against a running broker:
create, stats, lastMessageId, subscriptions create / list / delete, reset
cursor by message id and by time, unload; error statuses and bodies."""

from __future__ import annotations

import urllib.request
import uuid

import pulsar

from tests.support.brokers import BrokerThread
from tests.support.http_calls import http_call
from tests.support.official import official_client


def _topic() -> str:
    return f"admin-{uuid.uuid4().hex[:8]}"


def test_create_topic_stats_and_last_message_id(broker: BrokerThread) -> None:
    """A created topic is listed; stats show publishers and per-subscription
    backlog; lastMessageId is the newest entry (SEM-3.9 mark-delete aside)."""
    name = _topic()
    url = f"{broker.http_url}/admin/v2/persistent/public/default/{name}"
    assert http_call("PUT", url) == (204, None)
    status, body = http_call("PUT", url)
    assert status == 409 and "already exists" in body["reason"]
    listed = http_call("GET", f"{broker.http_url}/admin/v2/persistent/public/default")[1]
    assert f"persistent://public/default/{name}" in listed
    assert http_call("PUT", f"{url}/subscription/sub", {"ledgerId": -1, "entryId": -1}) == (
        204,
        None,
    )
    assert http_call("PUT", f"{url}/subscription/sub")[0] == 409
    with official_client(broker.url) as client:
        producer = client.create_producer(
            f"persistent://public/default/{name}", batching_enabled=False
        )
        ids = [producer.send(f"m{i}".encode()) for i in range(5)]
        status, stats = http_call("GET", f"{url}/stats")
        assert status == 200
        assert [p["producerName"] for p in stats["publishers"]] == [producer.producer_name()]
        # What the client said it is (the C++ suite's ClientTest.testClientVersion).
        assert stats["publishers"][0]["clientVersion"].startswith("Pulsar-CPP-v")
        assert stats["subscriptions"]["sub"]["msgBacklog"] == 5
        status, last = http_call("GET", f"{url}/lastMessageId")
        assert status == 200
        assert (last["ledgerId"], last["entryId"]) == (ids[-1].ledger_id(), ids[-1].entry_id())
        assert http_call("GET", f"{url}/subscriptions") == (200, ["sub"])

        # Reset to the third message by id: a consumer gets m2.. first.
        target = {"ledgerId": ids[2].ledger_id(), "entryId": ids[2].entry_id()}
        assert http_call("POST", f"{url}/subscription/sub/resetcursor", target) == (204, None)
        assert http_call("GET", f"{url}/stats")[1]["subscriptions"]["sub"]["msgBacklog"] == 3
        consumer = client.subscribe(
            f"persistent://public/default/{name}", "sub", consumer_type=pulsar.ConsumerType.Shared
        )
        assert consumer.receive(timeout_millis=10_000).data() == b"m2"
        sub_stats = http_call("GET", f"{url}/stats")[1]["subscriptions"]["sub"]
        assert sub_stats["consumers"] and sub_stats["type"] == "Shared"
        assert sub_stats["consumers"][0]["clientVersion"].startswith("Pulsar-CPP-v")
        # A subscription with a consumer cannot be deleted (412).
        status, body = http_call("DELETE", f"{url}/subscription/sub")
        assert status == 412 and "consumer" in body["reason"]
        consumer.close()
        # Reset by time 0: everything again.
        assert http_call("POST", f"{url}/subscription/sub/resetcursor/0") == (204, None)
        assert http_call("GET", f"{url}/stats")[1]["subscriptions"]["sub"]["msgBacklog"] == 5
        assert http_call("DELETE", f"{url}/subscription/sub") == (204, None)
        assert http_call("GET", f"{url}/subscriptions") == (200, [])
        producer.close()


def test_errors_and_unload(broker: BrokerThread) -> None:
    """Unknown topics and subscriptions are 404 with a reason; bad message
    ids and timestamps are 400; unload closes a loaded topic and it loads
    again on the next use."""
    base = f"{broker.http_url}/admin/v2/persistent/public/default"
    name = _topic()
    url = f"{base}/{name}"
    for path in ("stats", "lastMessageId", "subscriptions"):
        status, body = http_call("GET", f"{url}/{path}")
        assert status == 404 and body["reason"], path
    assert http_call("PUT", url) == (204, None)
    status, body = http_call("DELETE", f"{url}/subscription/missing")
    assert status == 404 and "missing" in body["reason"]
    status, body = http_call("POST", f"{url}/subscription/missing/resetcursor/0")
    assert status == 404
    assert http_call("PUT", f"{url}/subscription/s") == (204, None)
    status, body = http_call("POST", f"{url}/subscription/s/resetcursor", {"ledgerId": "x"})
    assert status == 400 and "ledgerId" in body["reason"]
    status, body = http_call("POST", f"{url}/subscription/s/resetcursor/yesterday")
    assert status == 400
    assert http_call("PUT", f"{url}/unload") == (204, None)
    # The stored subscription is still there after the unload.
    assert http_call("GET", f"{url}/subscriptions") == (200, ["s"])
    assert http_call("PUT", f"{base}/{_topic()}/unload")[0] == 404
    for probe in ("health", "ready"):
        url = f"{broker.http_url}/admin/v2/brokers/{probe}"
        with urllib.request.urlopen(url, timeout=10) as response:
            assert (response.status, response.read()) == (200, b"ok")


def test_namespace_operations_policies_are_stored(broker: BrokerThread) -> None:
    """Retention, message TTL, backlog quota and the schema compatibility
    strategy are stored and returned in Pulsar's shapes; bad values are 400."""
    ns = f"{broker.http_url}/admin/v2/namespaces/public/default"
    retention = {"retentionTimeInMinutes": 60, "retentionSizeInMB": 10}
    assert http_call("POST", f"{ns}/retention", retention) == (204, None)
    assert http_call("GET", f"{ns}/retention") == (200, retention)
    assert http_call("POST", f"{ns}/messageTTL", 30) == (204, None)
    assert http_call("GET", f"{ns}/messageTTL") == (200, 30)
    status, body = http_call("POST", f"{ns}/messageTTL", "soon")
    assert status == 400 and "integer" in body["reason"]
    quota = {"limitSize": 1024, "limitTime": -1, "policy": "producer_exception"}
    assert http_call("POST", f"{ns}/backlogQuota", quota) == (204, None)
    assert http_call("GET", f"{ns}/backlogQuotaMap") == (200, {"destination_storage": quota})
    status, body = http_call("POST", f"{ns}/backlogQuota", {**quota, "policy": "drop_all"})
    assert status == 400 and "producer_request_hold" in body["reason"]
    assert http_call("PUT", f"{ns}/schemaCompatibilityStrategy", "FULL") == (204, None)
    assert http_call("GET", f"{ns}/schemaCompatibilityStrategy") == (200, "FULL")
    assert http_call("PUT", f"{ns}/schemaCompatibilityStrategy", "SOME")[0] == 400
    for path in ("retention", "messageTTL", "backlogQuota"):
        assert http_call("DELETE", f"{ns}/{path}") == (204, None)
    assert http_call("GET", f"{ns}/messageTTL") == (200, None)
    assert http_call("GET", f"{ns}/backlogQuotaMap") == (200, {})
    assert http_call("DELETE", f"{ns}/deduplication") == (204, None)
    status, body = http_call("GET", f"{broker.http_url}/admin/v2/namespaces/public/nope/retention")
    assert status == 404 and "does not exist" in body["reason"]


def test_skip_clear_expire_peek_and_internal_stats(broker: BrokerThread) -> None:
    """Skip N, clear backlog and expire move the subscription's mark-delete
    (SEM-3.9: what a cumulative ack would); peek returns the n-th
    unacknowledged message; internalStats shows the ledger and the cursor."""
    name = _topic()
    url = f"{broker.http_url}/admin/v2/persistent/public/default/{name}"
    sub = f"{url}/subscription/s"
    assert http_call("PUT", sub, {"ledgerId": -1, "entryId": -1}) == (204, None)
    with official_client(broker.url) as client:
        producer = client.create_producer(
            f"persistent://public/default/{name}", batching_enabled=False
        )
        ids = [producer.send(f"m{i}".encode()) for i in range(6)]
        producer.close()

    def backlog() -> int:
        return int(http_call("GET", f"{url}/stats")[1]["subscriptions"]["s"]["msgBacklog"])

    with urllib.request.urlopen(f"{sub}/position/2", timeout=10) as response:
        assert response.read() == b"m1"
        assert response.headers["X-Pulsar-Message-ID"] == (
            f"{ids[1].ledger_id()}:{ids[1].entry_id()}"
        )
    assert http_call("GET", f"{sub}/position/7")[0] == 404
    assert http_call("POST", f"{sub}/skip/2") == (204, None)
    assert backlog() == 4
    with urllib.request.urlopen(f"{sub}/position/1", timeout=10) as response:
        assert response.read() == b"m2"
    status, internal = http_call("GET", f"{url}/internalStats")
    assert status == 200 and internal["numberOfEntries"] == 6
    assert internal["cursors"]["s"]["markDeletePosition"] == (
        f"{ids[1].ledger_id()}:{ids[1].entry_id()}"
    )
    assert internal["ledgers"] and internal["lastConfirmedEntry"] == (
        f"{ids[5].ledger_id()}:{ids[5].entry_id()}"
    )
    # Messages published just now are not older than an hour: nothing expires.
    assert http_call("POST", f"{sub}/expireMessages/3600") == (204, None)
    assert backlog() == 4
    assert http_call("POST", f"{url}/all_subscription/expireMessages/0") == (204, None)
    assert backlog() == 0
    assert http_call("POST", f"{sub}/resetcursor/0") == (204, None)
    assert backlog() == 6
    assert http_call("POST", f"{sub}/skip_all") == (204, None)
    assert backlog() == 0
    assert http_call("POST", f"{sub}/skip/many")[0] == 400


def test_partitioned_stats(broker: BrokerThread) -> None:
    """partitioned-stats merges the partitions' subscriptions and lists each
    partition; a non-partitioned topic is 404."""
    name = _topic()
    url = f"{broker.http_url}/admin/v2/persistent/public/default/{name}"
    assert http_call("PUT", f"{url}/partitions", 2) == (204, None)
    topic = f"persistent://public/default/{name}"
    with official_client(broker.url) as client:
        consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(4):
            producer.send(f"m{i}".encode(), partition_key=str(i))
        status, stats = http_call("GET", f"{url}/partitioned-stats")
        assert status == 200 and stats["metadata"] == {"partitions": 2}
        assert set(stats["partitions"]) == {f"{topic}-partition-0", f"{topic}-partition-1"}
        assert len(stats["subscriptions"]["s"]["consumers"]) == 2
        consumer.close()
        producer.close()
    other = f"{broker.http_url}/admin/v2/persistent/public/default/{_topic()}"
    assert http_call("PUT", other) == (204, None)
    assert http_call("GET", f"{other}/partitioned-stats")[0] == 404
