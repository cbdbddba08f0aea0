"""Message TTL enforced by the broker: the expiry sweep moves a
subscription's mark-delete past messages older than the namespace's TTL, so
its backlog drops without any consumer (Pulsar's messageTTL)."""

from __future__ import annotations

import time
import uuid

from tests.support.brokers import BrokerFactory
from tests.support.http_calls import http_call
from tests.support.official import official_client


def test_message_ttl_expires_backlog(broker_factory: BrokerFactory) -> None:
    """TTL 1 s with a fast sweep: the backlog of an idle subscription goes to
    0; a namespace without TTL keeps its backlog."""
    broker = broker_factory(message_expiry_check_interval_seconds=0.2)
    ns = f"ttl-{uuid.uuid4().hex[:6]}"
    base = f"{broker.http_url}/admin/v2"
    assert http_call("PUT", f"{base}/namespaces/public/{ns}") == (204, None)
    assert http_call("POST", f"{base}/namespaces/public/{ns}/messageTTL", 1) == (204, None)
    expiring = f"persistent://public/{ns}/t"
    kept = f"persistent://public/default/ttl-{uuid.uuid4().hex[:6]}"
    with official_client(broker.url) as client:
        for topic in (expiring, kept):
            client.subscribe(topic, "idle").close()
            producer = client.create_producer(topic, batching_enabled=False)
            for i in range(5):
                producer.send(f"m{i}".encode())
            producer.close()

    def backlog(topic: str) -> int:
        url = f"{base}/{topic.replace('://', '/')}/stats"
        return int(http_call("GET", url)[1]["subscriptions"]["idle"]["msgBacklog"])

    deadline = time.monotonic() + 30
    while backlog(expiring) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert backlog(expiring) == 0
    assert backlog(kept) == 5
