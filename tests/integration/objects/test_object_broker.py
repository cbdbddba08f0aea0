"""The broker daemon on object storage (SeaweedFS), driven by the official
client: produce, SIGKILL during rounds, restart, read back; and a start that
fails with one clear line when the bucket is missing."""

from __future__ import annotations

import threading
from pathlib import Path

import pulsar
import pytest

from tests.support.brokers import BrokerProcess
from tests.support.official import official_client
from tests.support.seaweedfs import SeaweedServer

TOPIC = "persistent://public/default/on-objects"
TOTAL = 3000
KILL_AFTER = 1200

pytestmark = pytest.mark.slow


def _broker(tmp_path: Path, seaweedfs: SeaweedServer, url: str) -> BrokerProcess:
    return BrokerProcess(
        tmp_path / "data",
        tmp_path / "broker.log",
        storage="object",
        object_store_url=url,
        object_store_endpoint=seaweedfs.endpoint,
        # A send stored but not yet acknowledged when the broker died comes
        # again from the client: deduplication (its state read back from the
        # objects) keeps it once.
        broker_deduplication_enabled=True,
    )


def test_acknowledged_sends_survive_sigkill_once_and_in_order(
    tmp_path: Path, seaweedfs: SeaweedServer, object_store_url: str
) -> None:
    """SEM-3.9 on object storage: every send the broker acknowledged is read
    back after a SIGKILL in the middle of the rounds, once, in order."""
    broker = _broker(tmp_path, seaweedfs, object_store_url).start()
    acknowledged: list[int] = []
    lock = threading.Lock()
    killed = threading.Event()
    try:
        with official_client(broker.url, operation_timeout_seconds=30) as client:
            # The subscription holds everything written.
            client.subscribe(TOPIC, "all").close()
            producer = client.create_producer(
                TOPIC,
                batching_enabled=False,
                block_if_queue_full=True,
                max_pending_messages=500,
                send_timeout_millis=60_000,
            )

            def sent(number: int) -> object:
                def callback(result: pulsar.Result, _msg_id: pulsar.MessageId) -> None:
                    if result == pulsar.Result.Ok:
                        with lock:
                            acknowledged.append(number)
                            if len(acknowledged) == KILL_AFTER and not killed.is_set():
                                killed.set()

                return callback

            restart: threading.Thread | None = None
            for number in range(TOTAL):
                producer.send_async(b"%d" % number, sent(number))
                if killed.is_set() and restart is None:
                    broker.kill()  # rounds in flight, sends queued in the client
                    restart = threading.Thread(target=broker.start)
                    restart.start()
            producer.flush()
            producer.close()
            assert restart is not None
            restart.join()

            consumer = client.subscribe(TOPIC, "all")
            received: list[int] = []
            while True:
                try:
                    msg = consumer.receive(timeout_millis=5000)
                except pulsar.Timeout:
                    break
                received.append(int(msg.data()))
                consumer.acknowledge(msg)
    finally:
        broker.stop()

    got = set(received)
    assert set(acknowledged) <= got, sorted(set(acknowledged) - got)[:10]
    assert len(received) == len(got), "a message came back twice"
    assert received == sorted(received), "out of order"


def test_a_missing_bucket_fails_the_start_with_one_clear_line(
    tmp_path: Path, seaweedfs: SeaweedServer, object_store_url: str
) -> None:
    broker = _broker(tmp_path, seaweedfs, "s3://no-such-bucket/x")
    with pytest.raises(RuntimeError, match="broker exited with 1"):
        broker.start()
    log = (tmp_path / "broker.log").read_text()
    assert "broker failed to start" in log
    assert "bucket 'no-such-bucket' does not exist" in log
