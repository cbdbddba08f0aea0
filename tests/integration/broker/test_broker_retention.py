"""Retention enforced by the broker: once every subscription has consumed a
ledger and the namespace's retention no longer keeps it, the ledger's file
is deleted (Pulsar's retention policies: consumed data is kept up to the
retention time *or* size, and nothing more)."""

from __future__ import annotations

import time
import uuid

from tests.support.brokers import BrokerFactory, BrokerThread, ledger_files
from tests.support.http_calls import http_call
from tests.support.official import official_client

MESSAGES = 200


def _produce(broker: BrokerThread, topic: str) -> None:
    """200 entries behind a subscription "sub" that has read none of them."""
    with official_client(broker.url) as client:
        client.subscribe(topic, "sub").close()
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(MESSAGES):
            producer.send(f"{i:04d}".encode() * 50)
        producer.close()


def _consume(broker: BrokerThread, topic: str) -> None:
    with official_client(broker.url) as client:
        consumer = client.subscribe(topic, "sub")
        for _ in range(MESSAGES):
            consumer.acknowledge(consumer.receive(5000))
        consumer.close()


def _namespace(broker: BrokerThread, retention: dict[str, int] | None) -> str:
    ns = f"ret-{uuid.uuid4().hex[:6]}"
    base = f"{broker.http_url}/admin/v2/namespaces/public/{ns}"
    assert http_call("PUT", base) == (204, None)
    if retention is not None:
        assert http_call("POST", f"{base}/retention", retention) == (204, None)
    return ns


def test_consumed_ledgers_are_deleted(broker_factory: BrokerFactory) -> None:
    """SEM retention: small ledgers (4 KiB segments), the default retention
    (0 / 0: keep nothing consumed); after the subscription consumes all 200
    messages the sweep deletes every closed ledger's file and storageSize
    falls; an unconsumed backlog and an unlimited retention keep theirs."""
    broker = broker_factory(
        managed_ledger_max_segment_size=4096,
        message_expiry_check_interval_seconds=0.2,
    )
    consumed = _namespace(broker, None)
    unread = _namespace(broker, None)
    kept = _namespace(broker, {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1})
    topic = {ns: f"persistent://public/{ns}/t" for ns in (consumed, unread, kept)}

    def storage_size(ns: str) -> int:
        url = f"{broker.http_url}/admin/v2/persistent/public/{ns}/t/stats"
        return int(http_call("GET", url)[1]["storageSize"])

    # Measured while nothing is consumed, so no sweep can have trimmed yet.
    for ns in topic:
        _produce(broker, topic[ns])
    before = {ns: len(ledger_files(broker, ns)) for ns in topic}
    # 200 x 200-byte entries over 4 KiB segments: many ledgers each.
    assert all(count >= 5 for count in before.values()), before
    size_before = storage_size(consumed)
    _consume(broker, topic[consumed])
    _consume(broker, topic[kept])
    deadline = time.monotonic() + 30
    while len(ledger_files(broker, consumed)) >= before[consumed] - 3:
        assert time.monotonic() < deadline, "consumed ledgers were never deleted"
        time.sleep(0.2)
    # Only the open ledger stays.
    assert storage_size(consumed) < size_before // 3
    # Another full sweep (run here, not waited for): the others keep every file.
    assert broker.server is not None and broker.server.service is not None
    broker.call(broker.server.service.expiry.sweep())
    assert len(ledger_files(broker, unread)) == before[unread]
    assert len(ledger_files(broker, kept)) == before[kept]
