"""Hostile input (issue 15): a hypothesis state machine speaks raw frames to a
live broker (valid, mutated, truncated, split, reordered and oversized frames,
commands with unknown ids); the broker answers or closes the connection,
never logs an unhandled exception, and an official client on another
connection is served throughout."""

from __future__ import annotations

import socket
import struct
import uuid
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any

import pytest
import structlog
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule, run_state_machine_as_test

from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.errors import ProtocolError
from magnetar.proto.frames import Payload, encode_command, encode_payload_command, wrap
from tests.support.brokers import BrokerThread, broker_config
from tests.support.official import official_client
from tests.support.proto_strategies import FrameCase, frames, split_at
from tests.support.raw_client import RawClient

T = pb.BaseCommand
TOPIC = "persistent://public/default/hostile"


def _valid_frames() -> list[bytes]:
    """A well-formed conversation: connect, produce, subscribe, flow, ack."""
    metadata = pb.MessageMetadata(producer_name="h", sequence_id=0, publish_time=1)
    return [
        encode_command(wrap(pb.CommandConnect(client_version="h", protocol_version=20))),
        encode_command(wrap(pb.CommandProducer(topic=TOPIC, producer_id=1, request_id=1))),
        encode_payload_command(
            wrap(pb.CommandSend(producer_id=1, sequence_id=0)), Payload.build(metadata, b"x")
        ),
        encode_command(
            wrap(
                pb.CommandSubscribe(
                    topic=TOPIC,
                    subscription="s",
                    subType=pb.CommandSubscribe.Shared,
                    consumer_id=1,
                    request_id=2,
                )
            )
        ),
        encode_command(wrap(pb.CommandFlow(consumer_id=1, messagePermits=10))),
        encode_command(
            wrap(
                pb.CommandAck(
                    consumer_id=1,
                    ack_type=pb.CommandAck.Individual,
                    message_id=[pb.MessageIdData(ledgerId=1, entryId=0)],
                )
            )
        ),
    ]


VALID = _valid_frames()


class HostileClient(RuleBasedStateMachine):
    """One raw connection at a time; a rule's bytes may make the broker close it."""

    broker: BrokerThread

    def __init__(self) -> None:
        super().__init__()
        self.raw: RawClient | None = None

    @initialize()
    def open(self) -> None:
        self._reopen()

    def _reopen(self) -> None:
        if self.raw is not None:
            self.raw.close()
        self.raw = RawClient.for_broker(self.broker)

    def _send(self, *chunks: bytes) -> None:
        assert self.raw is not None
        try:
            for chunk in chunks:
                self.raw.send_raw(chunk)
        except OSError:
            self._reopen()  # the broker closed it: a legitimate answer
            return
        self._drain()

    def _drain(self) -> None:
        """Read what the broker says now; reopen if it closed the connection."""
        assert self.raw is not None
        while True:
            try:
                frame = self.raw.next_frame(timeout=0.02)
            except TimeoutError:
                return
            except (EOFError, OSError, ProtocolError):
                self._reopen()
                return
            if frame.type == T.PING:
                self._send(encode_command(wrap(pb.CommandPong())))

    @rule(step=st.integers(0, len(VALID) - 1))
    def valid(self, step: int) -> None:
        self._send(VALID[step])

    @rule(case=frames())
    def any_command(self, case: FrameCase) -> None:
        self._send(case.data)

    @rule(case=frames(), flips=st.lists(st.tuples(st.integers(0), st.integers(0, 255)), max_size=4))
    def mutated(self, case: FrameCase, flips: list[tuple[int, int]]) -> None:
        data = bytearray(case.data)
        for index, value in flips:
            data[index % len(data)] = value
        self._send(bytes(data))

    @rule(case=frames(), sizes=st.lists(st.integers(1, 7), min_size=1, max_size=5))
    def split(self, case: FrameCase, sizes: list[int]) -> None:
        self._send(*split_at(case.data, sizes))

    @rule(case=frames(), keep=st.floats(0.0, 0.99))
    def truncated_then_gone(self, case: FrameCase, keep: float) -> None:
        self._send(case.data[: int(len(case.data) * keep)])
        self._reopen()

    @rule(size=st.integers(5 * 1024 * 1024 + 10, 2**32 - 1))
    def oversized(self, size: int) -> None:
        self._send(struct.pack(">I", size) + b"\x00" * 16)

    @rule(order=st.permutations(range(len(VALID))))
    def reordered(self, order: list[int]) -> None:
        self._send(b"".join(VALID[i] for i in order))

    @rule()
    def reconnect(self) -> None:
        self._reopen()

    def teardown(self) -> None:
        if self.raw is not None:
            self.raw.close()


@pytest.fixture(scope="module")
def hostile_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    data = Path(tmp_path_factory.mktemp("hostile"))
    with BrokerThread(broker_config(data)) as broker:
        yield broker


def _served(broker: BrokerThread) -> None:
    topic = f"persistent://public/default/bystander-{uuid.uuid4().hex[:8]}"
    with official_client(broker.url) as client:
        consumer = client.subscribe(topic, "bystander")
        client.create_producer(topic).send(b"still served")
        msg = consumer.receive(timeout_millis=5000)
        assert msg.data() == b"still served"
        consumer.acknowledge(msg)


def test_state_machine_of_hostile_frames(hostile_broker: BrokerThread) -> None:
    """Whatever arrives, the broker answers or closes, logs no traceback and
    no error, and keeps serving a well-behaved client (derandomized so CI
    runs the same sequences every time)."""
    entries: list[MutableMapping[str, Any]]
    with structlog.testing.capture_logs() as entries:
        HostileClient.broker = hostile_broker
        run_state_machine_as_test(
            HostileClient,
            settings=settings(
                max_examples=40,
                stateful_step_count=20,
                deadline=None,
                derandomize=True,
                database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
            ),
        )
        _served(hostile_broker)
    # The capture sees the broker's own lines (its refusals log warnings).
    assert any(e.get("log_level") == "warning" for e in entries)
    bad = [e for e in entries if "exc_info" in e or e.get("log_level") in ("error", "critical")]
    assert bad == []
    # Every hostile connection is gone again.
    with socket.create_connection(("127.0.0.1", hostile_broker.port)):
        pass
