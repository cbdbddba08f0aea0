"""Issue 19.4: appends failing for lack of room (RLIMIT_FSIZE on the broker
process) give producers PersistenceError, a handful of log lines rather than
one per publish, a metric and an unhealthy health endpoint; when room returns
publishing resumes by itself and every acknowledged message is readable; reads
and acks go on meanwhile."""

from __future__ import annotations

import resource
import signal
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from magnetar.proto import pulsar_api_pb2 as pb
from tests.support.brokers import BrokerProcess
from tests.support.official import official_client
from tests.support.raw_client import RawClient

T = pb.BaseCommand
TOPIC = "persistent://public/default/disk-full"
LIMIT = 1024 * 1024
BODY = b"x" * 16 * 1024


def _limit_file_size() -> None:
    # In the broker child: files stop growing at LIMIT; EFBIG instead of SIGXFSZ.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, resource.RLIM_INFINITY))


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "data", tmp_path / "broker.log", sync_policy="none")
    process.env["MAGNETAR_LOG_FORMAT"] = "json"
    process.start(preexec=_limit_file_size)
    try:
        yield process
    finally:
        process.stop()


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _metric(broker: BrokerProcess, name: str) -> float:
    _, text = _get(f"{broker.http_url}/metrics")
    values = [line.split()[-1] for line in text.splitlines() if line.startswith(name + " ")]
    return float(values[0])


def test_disk_full_then_room_again(broker: BrokerProcess) -> None:
    acked: list[bytes] = []
    errors: list[pb.CommandSendError] = []
    with RawClient("127.0.0.1", broker.port) as client:
        client.connect()
        client.create_producer(TOPIC, producer_id=1)
        client.subscribe(TOPIC, "keep", 1)
        for seq in range(200):  # 3.2 MB against a 1 MB file limit
            body = b"%05d" % seq + BODY
            client.send_message(1, seq, body)
            frame = client.next_frame()
            while frame.type == T.PING:
                client.send(pb.CommandPong())
                frame = client.next_frame()
            if frame.type == T.SEND_ERROR:
                errors.append(frame.command.send_error)
            else:
                assert frame.type == T.SEND_RECEIPT, frame
                acked.append(body)
        assert acked and errors
        assert {e.error for e in errors} == {pb.ServerError.PersistenceError}
        assert _metric(broker, "magnetar_storage_writable") == 0
        assert _metric(broker, "magnetar_storage_write_errors_total") >= len(errors)
        status, reason = _get(f"{broker.http_url}/admin/v2/brokers/health")
        assert status == 503 and "storage is not writable" in reason
        log_lines = [
            line
            for line in (broker.log_path.read_text().splitlines())
            if '"publish failed"' in line
        ]
        assert 1 <= len(log_lines) <= 3, len(log_lines)

        # Reads and acks go on while appends fail (issue 15).
        with official_client(broker.url) as during:
            consumer = during.subscribe(
                TOPIC, "during", initial_position=pulsar.InitialPosition.Earliest
            )
            seen = [consumer.receive(timeout_millis=5000) for _ in acked]
            assert [m.data() for m in seen] == acked
            consumer.acknowledge_cumulative(seen[-1])
            consumer.close()  # persists the cursor (metadata, not ledger files)

        # Room returns: the next publish goes through, no restart needed.
        assert broker.proc is not None
        resource.prlimit(
            broker.proc.pid,
            resource.RLIMIT_FSIZE,
            (resource.RLIM_INFINITY, resource.RLIM_INFINITY),
        )
        for seq in range(200, 205):
            body = b"%05d" % seq + BODY
            receipt = client.publish(1, seq, body)
            assert receipt.sequence_id == seq
            acked.append(body)
        assert _metric(broker, "magnetar_storage_writable") == 1
        assert _get(f"{broker.http_url}/admin/v2/brokers/health") == (200, "ok")
    with official_client(broker.url) as official:
        reader = official.create_reader(TOPIC, pulsar.MessageId.earliest)
        stored = []
        while reader.has_message_available():
            stored.append(reader.read_next(timeout_millis=5000).data())
        # The acks made while appends failed held: only the newer ones come.
        consumer = official.subscribe(TOPIC, "during")
        assert consumer.receive(timeout_millis=5000).data() == acked[-5]
    assert stored == acked
