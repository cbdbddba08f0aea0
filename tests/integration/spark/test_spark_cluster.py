"""The connector on a Spark standalone cluster (issue 46.2): a master and two
one-core workers as separate JVMs on loopback, and the driver in a process
of its own, so every task runs in an executor process, not in the driver
(tests/support/spark_cluster.py, tests/integration/spark/cluster_jobs.py):
batch reads and writes, a secured broker, a pattern over a partitioned and
a plain topic with a durable subscription, and data loss."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.integration.spark.cluster_runs import sink_rows, submit
from tests.support.brokers import BrokerFactory, BrokerThread
from tests.support.draining import stored_messages
from tests.support.http_calls import http_call
from tests.support.polling import eventually
from tests.support.spark_cluster import SparkCluster
from tests.support.spark_topics import create_partitioned, produce

# A driver program takes tens of seconds to start on a loaded machine.
pytestmark = pytest.mark.timeout(600)


def _topic(prefix: str) -> str:
    return f"persistent://public/default/{prefix}-{uuid.uuid4().hex[:8]}"


def test_batch_write_and_read_run_in_executor_processes(
    cluster: SparkCluster, broker: BrokerThread
) -> None:
    """Batch write of 2,000 rows in 4 tasks and a batch read, submitted to
    the cluster: the topic holds every row once, the read returns them all,
    and the tasks ran in executor processes, none of them the driver."""
    topic = _topic("cluster")
    seen = submit(
        cluster, "write_then_read", service_url=broker.url, topic=topic, count=2000, partitions=4
    )
    expected = sorted(f"v{i}" for i in range(2000))
    assert seen["values"] == expected
    assert sorted(m.data().decode() for m in stored_messages(broker.url, topic)) == expected
    assert seen["task_pids"] and seen["driver_pid"] not in seen["task_pids"]
    finished = cluster.status()["completedapps"]
    assert any(app["name"] == "magnetar-cluster-test" for app in finished)


def test_tls_and_a_token_on_the_cluster(
    cluster: SparkCluster, secured: tuple[BrokerThread, str, str]
) -> None:
    """Issue 46.2, auth and TLS: the `client.*` options (trust file, host
    name validation, a token) reach the executors' clients; a batch write and
    read through pulsar+ssl with the token store and return every row."""
    broker, ca_cert, token = secured
    assert broker.server is not None
    security = {
        "client.tls_trust_certs_file_path": ca_cert,
        "client.tls_validate_hostname": "true",
        "client.auth_plugin": "token",
        "client.auth_params": f"token:{token}",
    }
    topic = _topic("cluster-tls")
    seen = submit(
        cluster,
        "write_then_read",
        service_url=f"pulsar+ssl://localhost:{broker.server.tls_port}",
        topic=topic,
        count=300,
        partitions=2,
        options=security,
    )
    assert seen["values"] == sorted(f"v{i}" for i in range(300))


def _backlog(broker: BrokerThread, topic: str, stats: str, subscription: str) -> int:
    status, body = http_call(
        "GET", f"{broker.http_url}/admin/v2/{topic.replace('://', '/')}/{stats}"
    )
    assert status == 200, body
    return int(body["subscriptions"][subscription]["msgBacklog"])


def test_pattern_over_partitioned_and_plain_topics_with_a_subscription(
    cluster: SparkCluster, broker: BrokerThread, tmp_path: Path
) -> None:
    """Issue 46.2: `topics_pattern` matching a 3-partition topic and a plain
    one, `subscription` and `max_messages_per_trigger`, read by a stream on
    the cluster into a file sink: every message once, each row naming the
    partition it came from, and nothing left in the subscription's backlog
    (SEM-3 cumulative acknowledgement of the committed batches)."""
    prefix = f"pat{uuid.uuid4().hex[:6]}"
    partitioned = f"persistent://public/default/{prefix}-a"
    plain = f"persistent://public/default/{prefix}-b"
    create_partitioned(broker, partitioned, 3)
    produce(broker, partitioned, [f"a{i}" for i in range(300)])
    produce(broker, plain, [f"b{i}" for i in range(200)])
    output = tmp_path / "out"
    result = submit(
        cluster,
        "stream_read",
        service_url=broker.url,
        output=str(output),
        checkpoint=str(tmp_path / "checkpoint"),
        options={
            "topics_pattern": f"public/default/{prefix}-.*",
            "subscription": "etl",
            "max_messages_per_trigger": "120",
        },
    )
    assert result == {"failure": None}
    rows = sink_rows(output)
    assert sorted(r["value"] for r in rows) == sorted(
        [f"a{i}" for i in range(300)] + [f"b{i}" for i in range(200)]
    )
    assert {r["topic"] for r in rows} == {f"{partitioned}-partition-{i}" for i in range(3)} | {
        plain
    }
    assert _backlog(broker, partitioned, "partitioned-stats", "etl") == 0
    assert _backlog(broker, plain, "stats", "etl") == 0


def _ledgers(broker: BrokerThread, topic: str) -> list[int]:
    status, body = http_call(
        "GET", f"{broker.http_url}/admin/v2/{topic.replace('://', '/')}/internalStats"
    )
    assert status == 200, body
    return [int(ledger["ledgerId"]) for ledger in body["ledgers"]]


def test_data_loss_on_the_cluster(
    cluster: SparkCluster, broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    """SEM-5.4 on the cluster: a stream read 5 messages; retention then
    deleted ledgers it had yet to read. Restarted from its checkpoint it
    fails naming fail_on_data_loss and the partition; with the option false
    it reads on from the first message still stored."""
    # 1 KiB ledgers (about six 100-byte messages), consumed ones deleted at once.
    broker = broker_factory(
        managed_ledger_max_segment_size=1024, message_expiry_check_interval_seconds=0.2
    )
    topic = _topic("cluster-trim")
    first = produce(broker, topic, [f"a{i}" for i in range(5)], keyed=False, pad_to=100)
    output, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def run(**options: str) -> dict[str, Any]:
        return submit(
            cluster,
            "stream_read",
            service_url=broker.url,
            output=str(output),
            checkpoint=str(checkpoint),
            options={"topic": topic, **options},
        )

    assert run() == {"failure": None}
    later = produce(broker, topic, [f"b{i}" for i in range(60)], keyed=False, pad_to=100)
    doomed = {m.ledger_id() for m in first + later} - {later[-1].ledger_id()}
    eventually(
        "retention deleting all but the newest ledger",
        lambda: not doomed & set(_ledgers(broker, topic)),
        30,
    )
    stored = [m.data().rstrip(b".").decode() for m in stored_messages(broker.url, topic)]
    assert stored[0] != "b0" and stored[-1] == "b59"
    failure = run()["failure"]
    assert failure is not None and "fail_on_data_loss" in failure and topic in failure
    assert run(fail_on_data_loss="false") == {"failure": None}
    values = [r["value"].rstrip(".") for r in sink_rows(output)]
    assert sorted(values) == sorted([f"a{i}" for i in range(5)] + stored)
