"""The topic ledger calls (trim, internal-info, analyzeBacklog, backlogSize,
backlog, truncate) through a real broker with the official client: Pulsar's
paths, statuses and JSON, and their effects on the stored ledgers."""

from __future__ import annotations

import time
import uuid
from typing import Any

from tests.support.brokers import BrokerFactory, BrokerThread, ledger_files
from tests.support.http_calls import http_call
from tests.support.official import official_client
from tests.support.polling import eventually

MESSAGES = 200


def _namespace(broker: BrokerThread, retention: dict[str, int] | None = None) -> str:
    ns = f"public/led-{uuid.uuid4().hex[:6]}"
    base = f"{broker.http_url}/admin/v2/namespaces/{ns}"
    assert http_call("PUT", base) == (204, None)
    if retention is not None:
        assert http_call("POST", f"{base}/retention", retention) == (204, None)
    return ns


def _produce_many(broker: BrokerThread, topic: str) -> None:
    """200 unbatched 200-byte entries behind a subscription "sub"."""
    with official_client(broker.url) as client:
        client.subscribe(topic, "sub").close()
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(MESSAGES):
            producer.send(f"{i:04d}".encode() * 50)
        producer.close()


def _get(url: str) -> Any:
    status, body = http_call("GET", url)
    assert status == 200, body
    return body


def test_trim_deletes_consumed_ledgers_now(broker_factory: BrokerFactory) -> None:
    """Ledgers consumed under an unlimited retention stay; once the
    retention is back to the default (keep nothing consumed) POST /trim
    deletes them at once (no sweep runs in this test), leaving the current
    ledger: its files go from disk and internal-info lists one ledger."""
    broker = broker_factory(managed_ledger_max_segment_size=4096)
    ns = _namespace(broker, {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1})
    topic = f"persistent://{ns}/t"
    url = f"{broker.http_url}/admin/v2/persistent/{ns}/t"
    _produce_many(broker, topic)
    with official_client(broker.url) as client:
        consumer = client.subscribe(topic, "sub")
        for _ in range(MESSAGES):
            consumer.acknowledge(consumer.receive(5000))
        consumer.close()
    # The cursor persists within a second; its trim finds the retention.
    time.sleep(2.0)
    before = len(ledger_files(broker, ns.split("/")[1]))
    assert before >= 5
    assert len(_get(f"{url}/internal-info")["ledgers"]) >= 5
    assert http_call("DELETE", f"{broker.http_url}/admin/v2/namespaces/{ns}/retention")[0] == 204
    time.sleep(0.5)
    assert len(ledger_files(broker, ns.split("/")[1])) == before  # nothing trims by itself
    assert http_call("POST", f"{url}/trim") == (204, None)
    assert len(ledger_files(broker, ns.split("/")[1])) < before
    assert len(_get(f"{url}/internal-info")["ledgers"]) == 1
    assert http_call("POST", f"{broker.http_url}/admin/v2/persistent/{ns}/nope/trim")[0] == 404


def test_internal_info_and_offline_backlog(broker: BrokerThread) -> None:
    """internal-info: Pulsar's ManagedLedgerInfo (ledgers with entries and
    size, the cursor's mark-delete and its individually deleted range as
    open-closed MessageRangeInfo, terminatedPosition once terminated);
    backlog: PersistentOfflineTopicStats counting entries."""
    ns = _namespace(broker)
    topic = f"persistent://{ns}/info"
    url = f"{broker.http_url}/admin/v2/persistent/{ns}/info"
    with official_client(broker.url) as client:
        consumer = client.subscribe(topic, "sub")
        producer = client.create_producer(topic, batching_enabled=False)
        ids = [producer.send(f"m{i}".encode()) for i in range(10)]
        received = [consumer.receive(5000) for _ in range(10)]
        consumer.acknowledge(received[2])
        consumer.acknowledge(received[3])
        ledger = ids[0].ledger_id()

        def deleted_range_shown() -> bool:
            cursor = _get(f"{url}/internal-info")["cursors"]["sub"]
            return bool(cursor["individualDeletedMessages"])

        eventually("the acks in internal-info", deleted_range_shown)
        info = _get(f"{url}/internal-info")
        assert sum(led["entries"] for led in info["ledgers"]) == 10
        assert info["ledgers"][-1]["ledgerId"] == ledger
        assert info["ledgers"][-1]["timestamp"] is None  # the current ledger
        assert "terminatedPosition" not in info
        cursor = info["cursors"]["sub"]
        assert cursor["markDelete"] == {"ledgerId": ledger, "entryId": -1}
        assert cursor["cursorsLedgerId"] == -1
        assert cursor["individualDeletedMessages"] == [
            {
                "from": {"ledgerId": ledger, "entryId": 1},
                "to": {"ledgerId": ledger, "entryId": 3},
                "offloaded": False,
            }
        ]

        offline = _get(f"{url}/backlog")
        assert offline["topicName"] == topic
        assert offline["totalMessages"] == 10
        assert offline["messageBacklog"] == 8
        assert offline["cursorDetails"] == {"sub": {"cursorBacklog": 8, "cursorLedgerId": -1}}
        assert offline["storageSize"] == sum(d["size"] for d in offline["dataLedgerDetails"])
        assert offline["storageSize"] > 0
        assert offline["brokerName"]
        assert abs(offline["statGeneratedAt"] - time.time() * 1000) < 60_000
        producer.close()
        consumer.close()
    assert http_call("POST", f"{url}/terminate")[0] == 200
    assert _get(f"{url}/internal-info")["terminatedPosition"] == {
        "ledgerId": ledger,
        "entryId": ids[-1].entry_id(),
    }


def test_analyze_backlog_counts_unacked_entries(broker: BrokerThread) -> None:
    """analyzeBacklog reads the unacknowledged entries: two batches of four
    messages count 2 entries and 8 messages once the three single messages
    after them are acknowledged; a start position narrows the scan; no
    entry filters, so everything is accepted."""
    ns = _namespace(broker)
    topic = f"persistent://{ns}/scan"
    url = f"{broker.http_url}/admin/v2/persistent/{ns}/scan"
    with official_client(broker.url) as client:
        consumer = client.subscribe(topic, "sub")
        batched = client.create_producer(
            topic,
            batching_enabled=True,
            batching_max_messages=4,
            batching_max_publish_delay_ms=60_000,
        )
        for i in range(8):
            batched.send_async(f"b{i}".encode(), None)
        batched.flush()
        single = client.create_producer(topic, batching_enabled=False)
        for i in range(3):
            single.send(f"s{i}".encode())
        received = [consumer.receive(5000) for _ in range(11)]
        first = received[0].message_id()
        second = received[4].message_id()
        analysis = http_call("POST", f"{url}/subscription/sub/analyzeBacklog")
        assert analysis[0] == 200
        assert (analysis[1]["entries"], analysis[1]["messages"]) == (5, 11)
        for message in received[8:]:
            consumer.acknowledge(message)

        def singles_acked() -> bool:
            body = http_call("POST", f"{url}/subscription/sub/analyzeBacklog")[1]
            return bool(body["entries"] == 2)

        eventually("the acks", singles_acked)
        status, body = http_call("POST", f"{url}/subscription/sub/analyzeBacklog")
        assert status == 200
        start = f"{first.ledger_id()}:{first.entry_id()}"
        end = f"{second.ledger_id()}:{second.entry_id()}"
        assert body == {
            "entries": 2,
            "messages": 8,
            "markerMessages": 0,
            "filterAcceptedEntries": 2,
            "filterAcceptedMessages": 8,
            "filterRejectedEntries": 0,
            "filterRejectedMessages": 0,
            "filterRescheduledEntries": 0,
            "filterRescheduledMessages": 0,
            "aborted": False,
            "firstMessageId": start,
            "lastMessageId": end,
            "firstPosition": start,
            "lastPosition": end,
        }
        position = {"ledgerId": second.ledger_id(), "entryId": second.entry_id()}
        status, body = http_call("POST", f"{url}/subscription/sub/analyzeBacklog", position)
        assert (status, body["entries"], body["messages"]) == (200, 1, 4)
        assert http_call("POST", f"{url}/subscription/nope/analyzeBacklog")[0] == 404
        assert http_call("POST", f"{url}/subscription/sub/analyzeBacklog", [1])[0] == 400
        batched.close()
        single.close()
        consumer.close()


def test_backlog_size_by_message_id(broker: BrokerThread) -> None:
    """PUT backlogSize with a message id answers the bytes from it to the
    end: all of them from the first entry (or before the topic), half from
    the middle of ten equal entries, a long; a body that is no id is 400."""
    ns = _namespace(broker)
    topic = f"persistent://{ns}/size"
    url = f"{broker.http_url}/admin/v2/persistent/{ns}/size"
    with official_client(broker.url) as client:
        producer = client.create_producer(topic, batching_enabled=False)
        ids = [producer.send(b"x" * 100) for _ in range(10)]
        producer.close()
    total = _get(f"{url}/backlog")["storageSize"]
    ledger = ids[0].ledger_id()

    def size_from(ledger_id: int, entry_id: int) -> Any:
        body = {"ledgerId": ledger_id, "entryId": entry_id, "partitionIndex": -1}
        status, size = http_call("PUT", f"{url}/backlogSize", body)
        assert status == 200
        return size

    assert size_from(ledger, ids[0].entry_id()) == total
    assert size_from(-1, -1) == total
    assert size_from(ledger, ids[5].entry_id()) == total // 2
    assert size_from(ledger + 1000, 0) == 0
    assert http_call("PUT", f"{url}/backlogSize", {"ledgerId": "x"})[0] == 400


def test_truncate_clears_backlogs_and_deletes_ledgers(broker_factory: BrokerFactory) -> None:
    """DELETE truncate moves every subscription to the end and deletes every
    ledger but the current one, even under an unlimited retention (204);
    the topic goes on taking messages."""
    broker = broker_factory(managed_ledger_max_segment_size=4096)
    ns = _namespace(broker, {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1})
    topic = f"persistent://{ns}/t"
    url = f"{broker.http_url}/admin/v2/persistent/{ns}/t"
    _produce_many(broker, topic)
    before = len(ledger_files(broker, ns.split("/")[1]))
    assert before >= 5
    assert _get(f"{url}/stats")["subscriptions"]["sub"]["msgBacklog"] == MESSAGES
    assert http_call("DELETE", f"{url}/truncate") == (204, None)
    assert _get(f"{url}/stats")["subscriptions"]["sub"]["msgBacklog"] == 0
    assert len(_get(f"{url}/internal-info")["ledgers"]) == 1
    assert len(ledger_files(broker, ns.split("/")[1])) < before
    with official_client(broker.url) as client:
        consumer = client.subscribe(topic, "sub")
        producer = client.create_producer(topic)
        producer.send(b"after")
        assert consumer.receive(5000).data() == b"after"
        producer.close()
        consumer.close()


def test_non_persistent_topics_are_refused(broker: BrokerThread) -> None:
    """Every ledger call on a non-persistent topic is 405, as in Pulsar."""
    url = f"{broker.http_url}/admin/v2/non-persistent/public/default/np-{uuid.uuid4().hex[:6]}"
    position = {"ledgerId": 1, "entryId": 0}
    calls: list[tuple[str, str, object]] = [
        ("POST", "/trim", None),
        ("GET", "/internal-info", None),
        ("POST", "/subscription/s/analyzeBacklog", None),
        ("PUT", "/backlogSize", position),
        ("GET", "/backlog", None),
        ("DELETE", "/truncate", None),
    ]
    for method, suffix, body in calls:
        status, answer = http_call(method, url + suffix, body)
        assert status == 405, (suffix, answer)
        assert answer["reason"]
