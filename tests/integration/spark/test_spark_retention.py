"""Reading what retention deletes (issue 14): `fail_on_data_loss` when a
query's start offset is before the first message still stored, and the
`subscription` option that acknowledges committed batches so the broker may
delete them. The broker rolls ledgers over at 1 KiB, so a few dozen messages
make several ledgers, and deletes consumed ones at once (retention 0)."""

from __future__ import annotations

import contextlib
import uuid
from pathlib import Path
from typing import Any

import pytest
import structlog
from pyspark.errors import StreamingQueryException
from pyspark.sql.streaming.datasource import ReadAllAvailable

from magnetar.spark_connector.data_loss import DataLossError
from magnetar.spark_connector.read_options import ReadOptions
from magnetar.spark_connector.reading import StreamReader
from tests.support.brokers import BrokerFactory, BrokerThread
from tests.support.draining import stored_messages
from tests.support.http_calls import http_call
from tests.support.polling import eventually
from tests.support.spark_topics import create_partitioned, produce

SEGMENT = 1024  # bytes: about six 100-byte messages per ledger
# Trimming runs after a rollover, when a cursor's mark-delete enters another
# ledger, and in the periodic expiry sweep: a short sweep interval covers a
# mark-delete that reaches the end of a closed ledger without leaving it.
SWEEP_S = 0.2

# Several Spark jobs per test: room beyond the default 120 s on a loaded machine.
pytestmark = pytest.mark.timeout(300)


def _trimming_broker(broker_factory: BrokerFactory) -> BrokerThread:
    return broker_factory(
        managed_ledger_max_segment_size=SEGMENT, message_expiry_check_interval_seconds=SWEEP_S
    )


def _topic() -> str:
    return f"persistent://public/default/trim-{uuid.uuid4().hex[:8]}"


def _admin(broker: BrokerThread, topic: str, what: str) -> dict[str, Any]:
    path = topic.replace("://", "/")
    status, body = http_call("GET", f"{broker.http_url}/admin/v2/{path}/{what}")
    assert status == 200, body
    assert isinstance(body, dict)
    return body


def _ledgers(broker: BrokerThread, topic: str) -> list[int]:
    return [int(ledger["ledgerId"]) for ledger in _admin(broker, topic, "internalStats")["ledgers"]]


def _produce(broker: BrokerThread, topic: str, values: list[str]) -> list[Any]:
    """100-byte messages (see SEGMENT), unkeyed."""
    return produce(broker, topic, values, keyed=False, pad_to=100)


def _wait_trimmed(broker: BrokerThread, topic: str, ledger: int) -> None:
    """Trimming runs in the background (see SWEEP_S)."""
    eventually(
        f"the trim of ledger {ledger} of {topic}", lambda: ledger not in _ledgers(broker, topic), 30
    )


def _position(msg_id: Any) -> list[int]:
    return [msg_id.ledger_id(), msg_id.entry_id(), -1]


def _stream_reader(broker: BrokerThread, topic: str, **options: str) -> StreamReader:
    return StreamReader(ReadOptions.parse({"service_url": broker.url, "topic": topic, **options}))


def test_data_loss_is_checked_where_the_start_offset_was_trimmed(
    broker_factory: BrokerFactory,
) -> None:
    """SEM-5.4: with no durable cursor, retention deletes closed ledgers at
    once. A start offset in a deleted ledger fails planning naming the option
    and the partition; with fail_on_data_loss=false one warning line is
    logged, however often the batch is planned, and reading goes on."""
    broker = _trimming_broker(broker_factory)
    topic = _topic()
    ids = _produce(broker, topic, [f"m{i}" for i in range(40)])
    _wait_trimmed(broker, topic, ids[0].ledger_id())
    start = {topic: _position(ids[1])}
    with pytest.raises(DataLossError, match=rf"fail_on_data_loss.*|{topic}") as failure:
        _stream_reader(broker, topic).latestOffset(start, ReadAllAvailable())
    assert topic in str(failure.value) and "fail_on_data_loss" in str(failure.value)
    lenient = _stream_reader(broker, topic, fail_on_data_loss="false")
    with structlog.testing.capture_logs() as logs:
        end = lenient.latestOffset(start, ReadAllAvailable())
        assert lenient.latestOffset(start, ReadAllAvailable()) == end
    warnings = [e for e in logs if e["log_level"] == "warning"]
    assert len(warnings) == 1 and warnings[0]["partition"] == topic
    assert end == {topic: _position(ids[-1])}
    # A start whose ledger is still stored is no loss.
    kept = {topic: _position(ids[-3])}
    assert _stream_reader(broker, topic).latestOffset(kept, ReadAllAvailable()) == end


def test_a_ledger_the_query_itself_released_is_no_loss(broker_factory: BrokerFactory) -> None:
    """SEM-5.4: the subscription's cumulative acknowledgement of a ledger's
    last message lets retention delete that ledger; the next batch starts at
    that message and must not count the deleted ledger as lost."""
    broker = _trimming_broker(broker_factory)
    topic = _topic()
    source = _stream_reader(broker, topic, subscription="etl")
    _produce(broker, topic, ["first"])
    assert source.initialOffset() == {topic: [-1, -1, -1]}
    ids: list[Any] = []
    while not ids or ids[-1].ledger_id() == ids[0].ledger_id():
        ids += _produce(broker, topic, [f"m{len(ids)}"])
    last_of_first_ledger = {topic: _position(ids[-2])}
    source.commit(last_of_first_ledger)
    _wait_trimmed(broker, topic, ids[0].ledger_id())
    end = source.latestOffset(last_of_first_ledger, ReadAllAvailable())
    assert end == {topic: _position(ids[-1])}
    backlog = _admin(broker, topic, "stats")["subscriptions"]["etl"]["msgBacklog"]
    assert backlog == 1  # the message after the acknowledged ledger


def _run_stream(
    spark: Any, broker: BrokerThread, topic: str, checkpoint: Path, seen: list[str], **options: str
) -> Any:
    def collect(batch: Any, _batch_id: int) -> None:
        seen.extend(r.value.rstrip(b".").decode() for r in batch.collect())

    read = spark.readStream.format("magnetar").option("service_url", broker.url)
    for key, value in {"topic": topic, **options}.items():
        read = read.option(key, value)
    query = (
        read.load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    with contextlib.suppress(StreamingQueryException):  # the caller looks at exception()
        query.awaitTermination(180)
    return query


def test_streaming_query_after_retention_deleted_its_next_messages(
    spark: Any, broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    """SEM-5.4 with Spark: a query read 5 messages; 60 more arrive and no
    durable cursor holds them, so retention deletes all but the newest
    ledger. Restarted from its checkpoint the query fails, naming
    fail_on_data_loss and the partition; with the option false it reads on
    from the first message still stored."""
    broker = _trimming_broker(broker_factory)
    topic = _topic()
    first = _produce(broker, topic, [f"a{i}" for i in range(5)])
    seen: list[str] = []
    checkpoint = tmp_path / "checkpoint"
    query = _run_stream(spark, broker, topic, checkpoint, seen)
    assert query.exception() is None and seen == [f"a{i}" for i in range(5)]
    later = _produce(broker, topic, [f"b{i}" for i in range(60)])
    for ledger in sorted({m.ledger_id() for m in first + later[:-1]} - {later[-1].ledger_id()}):
        _wait_trimmed(broker, topic, ledger)
    stored = [m.data().rstrip(b".").decode() for m in stored_messages(broker.url, topic)]
    assert stored[0] != "b0" and stored[-1] == "b59"  # b0... were deleted unread
    query = _run_stream(spark, broker, topic, checkpoint, seen)
    assert query.exception() is not None
    message = str(query.exception())
    assert "fail_on_data_loss" in message and topic in message
    assert len(seen) == 5
    query = _run_stream(spark, broker, topic, checkpoint, seen, fail_on_data_loss="false")
    assert query.exception() is None
    assert seen[5:] == stored


def test_subscription_acknowledges_committed_batches(
    spark: Any, broker: BrokerThread, tmp_path: Path
) -> None:
    """SEM-3 cumulative acknowledgement: with `subscription`, each committed
    micro-batch is acknowledged there, so the subscription's backlog is what
    the query has not read yet."""
    topic = f"persistent://public/default/subs-{uuid.uuid4().hex[:8]}"
    create_partitioned(broker, topic, 2)
    _produce(broker, topic, [f"c{i}" for i in range(30)])
    seen: list[str] = []
    checkpoint = tmp_path / "checkpoint"
    options = {"subscription": "etl", "max_messages_per_trigger": "7"}
    query = _run_stream(spark, broker, topic, checkpoint, seen, **options)
    assert query.exception() is None and len(seen) == 30
    _produce(broker, topic, [f"d{i}" for i in range(11)])

    def backlog() -> int:
        stats = _admin(broker, topic, "partitioned-stats")  # summed over partitions
        return int(stats["subscriptions"]["etl"]["msgBacklog"])

    assert backlog() == 11
    query = _run_stream(spark, broker, topic, checkpoint, seen, **options)
    assert query.exception() is None and len(seen) == 41
    assert backlog() == 0
