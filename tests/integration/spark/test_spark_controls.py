"""Issue 46.4, Spark 4.3's streaming controls on a live query:
max_bytes_per_trigger bounds each micro-batch's bytes (a bigger message goes
alone), min_messages_per_trigger holds a trickle back until N messages wait
or max_trigger_delay has passed, and the query's progress shows the source's
latest offsets (reportLatestOffset) while its batches are behind them."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadMinRows

from magnetar.spark_connector.read_options import ReadOptions
from magnetar.spark_connector.reading import StreamReader
from tests.support.brokers import BrokerThread
from tests.support.polling import eventually
from tests.support.spark_topics import create_partitioned, produce

# Several Spark queries per test: room beyond the default 120 s on a loaded machine.
pytestmark = pytest.mark.timeout(300)


def _topic(broker: BrokerThread, partitions: int = 2) -> str:
    topic = f"persistent://public/default/ctl-{uuid.uuid4().hex[:8]}"
    create_partitioned(broker, topic, partitions)
    return topic


class Batches:
    """What a foreachBatch sink saw: each micro-batch's values, and when
    (not the empty batch 0 a new query runs with nothing to read)."""

    def __init__(self) -> None:
        self.values: list[list[str]] = []
        self.times: list[float] = []
        self._lock = threading.Lock()

    def __call__(self, batch: Any, _batch_id: int) -> None:
        rows = [r.value.decode().rstrip(".") for r in batch.collect()]
        if not rows:
            return
        with self._lock:
            self.values.append(rows)
            self.times.append(time.monotonic())

    def sizes(self) -> list[int]:
        with self._lock:
            return [len(v) for v in self.values]


def _start(
    spark: Any, broker: BrokerThread, topic: str, checkpoint: Path, sink: Batches,
    trigger: dict[str, Any], **options: str,
) -> Any:  # fmt: skip
    read = spark.readStream.format("magnetar").option("service_url", broker.url)
    for key, value in {"topic": topic, **options}.items():
        read = read.option(key, value)
    return (
        read.load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(**trigger)
        .start()
    )


@contextmanager
def _running(query: Any) -> Iterator[Any]:
    try:
        yield query
    finally:
        query.stop()
    assert query.exception() is None


def test_max_bytes_per_trigger_bounds_each_batch(
    spark: Any, broker: BrokerThread, tmp_path: Path
) -> None:
    """Issue 46.4 max_bytes_per_trigger: each message counts its payload and
    key (here 100 + 3 bytes), so 550 bytes admit 5 messages per micro-batch;
    a 2,000-byte message is read alone rather than stalling its partition."""
    topic = _topic(broker)
    small = [f"s{i:02}" for i in range(40)]
    produce(broker, topic, small[:20], pad_to=100)
    produce(broker, topic, ["big"], pad_to=2000)
    produce(broker, topic, small[20:], pad_to=100)
    sink = Batches()
    query = _start(
        spark, broker, topic, tmp_path / "cp", sink, {"availableNow": True},
        max_bytes_per_trigger="550",
    )  # fmt: skip
    query.awaitTermination(180)
    assert query.exception() is None
    assert sorted(v for batch in sink.values for v in batch) == sorted([*small, "big"])
    assert ["big"] in sink.values
    others = [batch for batch in sink.values if batch != ["big"]]
    assert all(1 <= len(batch) <= 5 for batch in others), sink.sizes()
    assert len(others) >= 8  # 40 messages, 5 at most in each
    for progress in query.recentProgress:
        assert progress.numInputRows <= 5


def _latest_in_progress(progress: Any) -> Any:
    """The source's latestOffset in a progress report (None if it reported none)."""
    raw = progress.sources[0]["latestOffset"]
    return json.loads(raw) if isinstance(raw, str) else raw


def test_min_messages_per_trigger_batches_a_trickle(
    spark: Any, broker: BrokerThread, tmp_path: Path
) -> None:
    """Issue 46.4 min_messages_per_trigger: with 3 of 5 messages waiting the
    query plans no batch although the source has seen them (its latest
    offsets in the idle progress); the fifth message makes one batch of 5."""
    topic = _topic(broker, partitions=1)
    partition = f"{topic}-partition-0"
    sink = Batches()
    # Idle triggers report progress every 100 ms rather than every 10 s.
    interval = "spark.sql.streaming.noDataProgressEventInterval"
    previous = spark.conf.get(interval)
    spark.conf.set(interval, "100")
    try:
        query = _start(
            spark, broker, topic, tmp_path / "cp", sink, {"processingTime": "200 milliseconds"},
            min_messages_per_trigger="5", max_trigger_delay="10m",
        )  # fmt: skip
    finally:
        spark.conf.set(interval, previous)
    with _running(query):
        ids = produce(broker, topic, ["t0", "t1", "t2"])
        third = [ids[-1].ledger_id(), ids[-1].entry_id(), ids[-1].batch_index()]

        def seen_and_held() -> bool:
            last = query.lastProgress
            return last is not None and (_latest_in_progress(last) or {}).get(partition) == third

        eventually("an idle progress showing the 3 messages", seen_and_held, timeout=120)
        assert sink.sizes() == [] and query.lastProgress.numInputRows == 0
        produce(broker, topic, ["t3", "t4"])
        eventually("a batch of 5", lambda: sink.sizes() == [5], timeout=120)
    assert sorted(sink.values[0]) == ["t0", "t1", "t2", "t3", "t4"]


def test_max_trigger_delay_releases_fewer_than_min(
    spark: Any, broker: BrokerThread, tmp_path: Path
) -> None:
    """Issue 46.4 max_trigger_delay: 3 messages, fewer than
    min_messages_per_trigger=100, make a batch once 3 s have passed since the
    query started (its first batch waits too), not before."""
    topic = _topic(broker)
    sink = Batches()
    started = time.monotonic()
    query = _start(
        spark, broker, topic, tmp_path / "cp", sink, {"processingTime": "200 milliseconds"},
        min_messages_per_trigger="100", max_trigger_delay="3s",
    )  # fmt: skip
    with _running(query):
        produce(broker, topic, ["d0", "d1", "d2"])
        eventually("a batch after the delay", lambda: sink.sizes() != [], timeout=120)
    assert sink.sizes() == [3]
    assert sink.times[0] - started >= 3.0


def test_progress_shows_the_latest_offsets_while_batches_are_behind(
    spark: Any, broker: BrokerThread, tmp_path: Path
) -> None:
    """Issue 46.4 reportLatestOffset: with max_messages_per_trigger=4 an
    availableNow run reads 30 messages in 8 batches; every batch's progress
    shows the partitions' true last messages as the source's latestOffset,
    ahead of its endOffset until the last batch."""
    topic = _topic(broker)
    ids = produce(broker, topic, [f"r{i:02}" for i in range(30)])
    truth = {
        f"{topic}-partition-{i.partition()}": [i.ledger_id(), i.entry_id(), i.batch_index()]
        for i in ids  # in order: the last of each partition stays
    }
    sink = Batches()
    query = _start(
        spark, broker, topic, tmp_path / "cp", sink, {"availableNow": True},
        max_messages_per_trigger="4",
    )  # fmt: skip
    query.awaitTermination(180)
    assert query.exception() is None
    assert sum(sink.sizes()) == 30 and max(sink.sizes()) <= 4
    progress = [p for p in query.recentProgress if p.numInputRows > 0]
    assert len(progress) >= 8
    for p in progress:
        assert _latest_in_progress(p) == truth
    ends = [json.loads(p.sources[0]["endOffset"]) for p in progress]
    assert ends[0] != truth and ends[-1] == truth


def test_the_driver_side_with_an_injected_clock(broker: BrokerThread) -> None:
    """Issue 46.4 on the stream reader itself (no Spark query; a fake clock):
    getDefaultReadLimit is ReadMinRows; latestOffset holds one message (of
    min_messages_per_trigger=2) back until the clock passes max_trigger_delay,
    then plans it; with three more waiting it plans two
    (max_messages_per_trigger=2); reportLatestOffset gives the partition's
    last message all along."""
    topic = _topic(broker, partitions=1)
    partition = f"{topic}-partition-0"
    now = [100.0]
    options = {
        "service_url": broker.url, "topic": topic, "min_messages_per_trigger": "2",
        "max_messages_per_trigger": "2", "max_trigger_delay": "5s",
    }  # fmt: skip
    reader = StreamReader(ReadOptions.parse(options), clock=lambda: now[0])
    limit = reader.getDefaultReadLimit()
    assert limit == ReadMinRows(2) and reader.reportLatestOffset() is None
    start = reader.initialOffset()
    assert reader.latestOffset(start, limit) == start  # nothing yet
    ids = produce(broker, topic, ["c0"])
    position = [[i.ledger_id(), i.entry_id(), i.batch_index()] for i in ids]
    assert reader.latestOffset(start, limit) == start  # 1 of 2, no delay yet
    assert reader.reportLatestOffset() == {partition: position[0]}
    now[0] += 5.0
    end = reader.latestOffset(start, limit)
    assert end == {partition: position[0]}  # the delay passed: what waits
    ids += produce(broker, topic, ["c1", "c2", "c3"])
    position = [[i.ledger_id(), i.entry_id(), i.batch_index()] for i in ids]
    assert reader.latestOffset(end, limit) == {partition: position[2]}  # 2 of 3
    assert reader.reportLatestOffset() == {partition: position[3]}
