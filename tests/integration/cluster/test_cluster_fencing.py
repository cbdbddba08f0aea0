"""Fencing: a broker paused past its lease (SIGSTOP) loses its bundles to
another broker, which fences the old ledger before writing; once resumed,
the paused broker never sends a receipt for an entry beyond the fence
(DESIGN "Processes": an owner that loses its etcd session stops
acknowledging at once)."""

from __future__ import annotations

import signal
import threading
from typing import Any

import pulsar
import pytest

from tests.integration.cluster.cluster_support import TIMEOUT
from tests.integration.cluster.conftest import BrokerMaker
from tests.integration.cluster.test_cluster_moves import keep_everything
from tests.support.official import official_client
from tests.support.polling import eventually

pytestmark = [pytest.mark.slow, pytest.mark.official]


def test_a_paused_owner_never_confirms_past_the_fence(cluster_broker: BrokerMaker) -> None:
    """Every receipt any producer got names a position that, read back from
    the new owner, holds exactly that message; every message is stored once."""
    first, second = cluster_broker(), cluster_broker()
    keep_everything(first)
    receipts: list[tuple[int, int, str]] = []
    lock = threading.Lock()

    def record(payload: str) -> Any:
        def done(result: Any, msg_id: Any) -> None:
            if result == pulsar.Result.Ok:
                with lock:
                    receipts.append((msg_id.ledger_id(), msg_id.entry_id(), payload))

        return done

    with (
        official_client(first.url, operation_timeout_seconds=30) as old_side,
        official_client(second.url, operation_timeout_seconds=30) as new_side,
    ):
        # A topic the first broker owns.
        for i in range(40):
            topic = f"persistent://public/default/fenced-{i}"
            old = old_side.create_producer(topic, batching_enabled=False, send_timeout_millis=0)
            if topic in first.ownership()["topics"]:
                break
            old.close()
        else:
            raise AssertionError("the first broker owns none of 40 topics")
        for n in range(10):
            old.send_async(f"old-{n}".encode(), record(f"old-{n}"))
        old.flush()
        first.signal(signal.SIGSTOP)
        try:
            # Queued in the paused broker's socket: written after it resumes.
            for n in range(10, 30):
                old.send_async(f"old-{n}".encode(), record(f"old-{n}"))
            eventually("lease expiry", lambda: first.broker_id not in second.brokers(), TIMEOUT)
            new = new_side.create_producer(topic, batching_enabled=False)
            for n in range(10):
                new.send_async(f"new-{n}".encode(), record(f"new-{n}"))
            new.flush()
        finally:
            first.signal(signal.SIGCONT)
        eventually("every send confirmed", lambda: len(receipts) == 40, timeout=60)
        old.close()
        new.close()
        reader = new_side.create_reader(topic, pulsar.MessageId.earliest)
        stored: dict[tuple[int, int], str] = {}
        while reader.has_message_available():
            msg = reader.read_next(10_000)
            stored[(msg.message_id().ledger_id(), msg.message_id().entry_id())] = (
                msg.data().decode()
            )
        reader.close()
    for ledger_id, entry_id, payload in receipts:
        assert stored.get((ledger_id, entry_id)) == payload, (ledger_id, entry_id, payload)
    assert sorted(stored.values()) == sorted(p for _, _, p in receipts)
