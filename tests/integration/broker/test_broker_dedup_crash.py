"""Effectively-once across crashes (SEMANTICS 7, issue 11): with
deduplication on, an official producer with send timeout 0 sends numbered
messages while the broker is SIGKILLed and restarted three times; a reader
then sees every number exactly once, in order.

The client reaches the broker through a proxy (an advertised listener), and
before each kill the proxy swallows the broker's receipts for a moment: the
broker has stored entries the client never heard of, so the client resends
them after the restart, which is exactly what deduplication must absorb."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from tests.support.brokers import BrokerProcess
from tests.support.official import official_client
from tests.support.tcp_proxy import TcpProxy

TOTAL = 20_000
KILL_AFTER = (4_000, 9_000, 14_000)
TOPIC = "persistent://public/default/dedup-crash"

pytestmark = pytest.mark.slow


@pytest.fixture
def process(tmp_path: Path) -> Iterator[tuple[BrokerProcess, TcpProxy]]:
    broker = BrokerProcess(
        tmp_path / "data", tmp_path / "broker.log", broker_deduplication_enabled=True
    )
    proxy = TcpProxy(broker.port)
    broker.env["MAGNETAR_ADVERTISED_LISTENERS"] = f"proxy:pulsar://127.0.0.1:{proxy.port}"
    broker.start()
    try:
        yield broker, proxy
    finally:
        broker.stop()
        proxy.close()


def test_sigkill_three_times_every_number_once(
    process: tuple[BrokerProcess, TcpProxy],
) -> None:
    broker, proxy = process
    acked = 0
    failures: list[str] = []
    lock = threading.Condition()

    def sent(result: pulsar.Result, _msg_id: pulsar.MessageId) -> None:
        nonlocal acked
        with lock:
            if result == pulsar.Result.Ok:
                acked += 1
            else:
                failures.append(str(result))
            lock.notify_all()

    with official_client(
        f"pulsar://127.0.0.1:{proxy.port}", operation_timeout_seconds=30, listener_name="proxy"
    ) as client:
        client.subscribe(TOPIC, "keep").close()  # keeps the data (SEM-5.4)
        producer = client.create_producer(
            TOPIC,
            producer_name="crash-test",
            send_timeout_millis=0,
            block_if_queue_full=True,
            batching_enabled=True,
            batching_max_publish_delay_ms=5,
        )
        kills = list(KILL_AFTER)

        def killer() -> None:
            while kills:
                with lock:
                    lock.wait_for(lambda: acked >= kills[0] or bool(failures), timeout=120)
                    if failures or acked < kills[0]:
                        return
                kills.pop(0)
                proxy.swallow_replies.set()
                # Let the broker store what arrives meanwhile; no receipt gets out.
                threading.Event().wait(0.2)
                broker.kill()
                proxy.drop_connections()
                proxy.swallow_replies.clear()
                broker.start()

        thread = threading.Thread(target=killer, name="killer")
        thread.start()
        for number in range(TOTAL):
            producer.send_async(b"%d" % number, sent)
        producer.flush()
        thread.join(120)
        assert not failures
        assert not kills, "the broker was not killed three times"
        with lock:
            assert lock.wait_for(lambda: acked == TOTAL, timeout=60)
        producer.close()

        reader = client.create_reader(TOPIC, pulsar.MessageId.earliest)
        numbers = []
        while reader.has_message_available():
            numbers.append(int(reader.read_next(timeout_millis=10_000).data()))
    assert numbers == list(range(TOTAL))
