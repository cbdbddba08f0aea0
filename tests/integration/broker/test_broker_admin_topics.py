"""Admin v2 for topics and subscriptions over HTTP against a running broker:
create, stats, lastMessageId, subscriptions create / list / delete, reset
cursor by message id and by time, unload; error statuses and bodies."""

from __future__ import annotations

import urllib.request
import uuid

import pulsar

from tests.integration.broker.harness import BrokerThread, http_call
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
