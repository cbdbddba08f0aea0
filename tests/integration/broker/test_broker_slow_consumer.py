"""Slow consumer (issue 15): a 1 GiB backlog behind a consumer that never acks.
The broker reads entries per permits and holds positions, not payloads, for
unacked messages, so its resident memory stays bounded by the entry cache
budget (128 MiB by default) plus its own baseline."""

from __future__ import annotations

import uuid
from pathlib import Path

import pulsar
import pytest

from tests.support.brokers import BrokerProcess
from tests.support.official import official_client

MESSAGE = 1024 * 1024
COUNT = 1024  # 1 GiB
BOUND_MIB = 400  # baseline (~80 MiB) + entry cache budget (128 MiB) + slack


def _memory_mib(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no {field} for {pid}")


@pytest.mark.slow
def test_a_gigabyte_backlog_behind_a_consumer_that_never_acks(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", tmp_path / "broker.log", sync_policy="none")
    broker.start()
    try:
        assert broker.proc is not None
        pid = broker.proc.pid
        topic = f"persistent://public/default/slow-{uuid.uuid4().hex[:8]}"
        payload = b"s" * MESSAGE
        with official_client(broker.url, operation_timeout_seconds=60) as client:
            consumer = client.subscribe(
                topic, "never-acks", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=4
            )
            producer = client.create_producer(
                topic,
                batching_enabled=False,
                max_pending_messages=64,
                block_if_queue_full=True,
                send_timeout_millis=0,
            )
            for _ in range(COUNT):
                producer.send_async(payload, None)
            producer.flush()
            peak_writing = _memory_mib(pid, "VmHWM")
            for _ in range(COUNT):
                msg = consumer.receive(timeout_millis=30000)
                assert len(msg.data()) == MESSAGE  # received, never acknowledged
            peak = _memory_mib(pid, "VmHWM")
            print(
                f"broker peak RSS: {peak_writing:.0f} MiB after writing, "
                f"{peak:.0f} MiB after reading 1 GiB"
            )
            assert peak < BOUND_MIB
    finally:
        broker.stop()
