"""Key-window deduplication (issue 11, a Magnetar extension): a message whose
`idempotency-key` was stored within the window is not stored again, and its
receipt names the first copy; it works for any client, across producers,
and survives a SIGKILL."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

from magnetar.broker.features.keywindow import parse_duration_ms
from tests.support.brokers import BrokerProcess, BrokerThread
from tests.support.draining import stored_payloads
from tests.support.http_calls import http_call
from tests.support.official import official_client


def _window_namespace(http_url: str, window: str) -> str:
    ns = f"kw-{uuid.uuid4().hex[:6]}"
    base = f"{http_url}/admin/v2/namespaces/public/{ns}"
    assert http_call("PUT", base)[0] == 204
    policy = {"window": window, "maxKeys": 1000}
    assert http_call("POST", f"{base}/dedupKeyWindow", policy) == (204, None)
    assert http_call("GET", f"{base}/dedupKeyWindow")[1]["maxKeys"] == 1000
    return ns


def test_parse_duration() -> None:
    assert [parse_duration_ms(v) for v in ("10m", "30s", "1h", "250ms", 2)] == [
        600_000,
        30_000,
        3_600_000,
        250,
        2000,
    ]


def test_same_key_from_two_producers_is_stored_once(broker: BrokerThread) -> None:
    topic = f"persistent://public/{_window_namespace(broker.http_url, '10m')}/orders"
    with official_client(broker.url) as client:
        client.subscribe(topic, "keep").close()
        first = client.create_producer(topic, producer_name="api-1")
        second = client.create_producer(topic, producer_name="api-2")
        a = first.send(b"order 42", properties={"idempotency-key": "req-42"})
        b = second.send(b"order 42, retried", properties={"idempotency-key": "req-42"})
        c = second.send(b"order 43", properties={"idempotency-key": "req-43"})
        d = first.send(b"no key")
        assert (b.ledger_id(), b.entry_id()) == (a.ledger_id(), a.entry_id())
        assert c.entry_id() == a.entry_id() + 1 and d.entry_id() == c.entry_id() + 1
    assert stored_payloads(broker.url, topic) == [b"order 42", b"order 43", b"no key"]


def test_key_accepted_again_after_the_window(broker: BrokerThread) -> None:
    topic = f"persistent://public/{_window_namespace(broker.http_url, '300ms')}/short"
    with official_client(broker.url) as client:
        client.subscribe(topic, "keep").close()
        producer = client.create_producer(topic)
        first = producer.send(b"one", properties={"idempotency-key": "k"})
        assert producer.send(b"dup", properties={"idempotency-key": "k"}).entry_id() == (
            first.entry_id()
        )
        threading.Event().wait(0.4)  # let the 300 ms window pass
        later = producer.send(b"two", properties={"idempotency-key": "k"})
        assert later.entry_id() == first.entry_id() + 1


def test_bad_policy_is_refused(broker: BrokerThread) -> None:
    base = f"{broker.http_url}/admin/v2/namespaces/public/default/dedupKeyWindow"
    status, body = http_call("POST", base, {"window": "soon"})
    assert status == 400 and "duration" in body["reason"]
    assert http_call("POST", base, {"window": "1m", "maxKeys": 0})[0] == 400


def test_index_survives_sigkill(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", tmp_path / "broker.log").start()
    try:
        topic = f"persistent://public/{_window_namespace(broker.http_url, '10m')}/crash"
        with official_client(broker.url) as client:
            client.subscribe(topic, "keep").close()
            producer = client.create_producer(topic)
            first = producer.send(b"before", properties={"idempotency-key": "survivor"})
        broker.kill()
        broker.start()
        with official_client(broker.url) as client:
            producer = client.create_producer(topic)
            again = producer.send(b"after", properties={"idempotency-key": "survivor"})
            assert (again.ledger_id(), again.entry_id()) == (first.ledger_id(), first.entry_id())
        assert stored_payloads(broker.url, topic) == [b"before"]
    finally:
        broker.stop()
