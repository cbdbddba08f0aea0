"""Choosing what to read (issue 14): `topics_pattern`, a regex over a
namespace resolved at each planning, and `starting_time`, each partition from
its first message published at or after a time."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.support.brokers import BrokerThread
from tests.support.spark_topics import create_partitioned, produce

# Several Spark jobs per test: room beyond the default 120 s on a loaded machine.
pytestmark = pytest.mark.timeout(300)


def _read(spark: Any, broker: BrokerThread, **options: str) -> list[str]:
    read = spark.read.format("magnetar").option("service_url", broker.url)
    for key, value in options.items():
        read = read.option(key, value)
    return sorted(r.value.decode() for r in read.load().collect())


def test_topics_pattern_reads_matching_topics_and_a_stream_finds_new_ones(
    spark: Any, broker: BrokerThread, tmp_path: Path
) -> None:
    """SEM-1 topics_pattern: the namespace's topics whose name matches the
    whole regex (a partitioned topic through its partitions); a streaming
    query resolves it again at each planning, so a topic created between two
    runs is read from its first message."""
    tag = uuid.uuid4().hex[:6]
    base = f"persistent://public/default/pat-{tag}"
    create_partitioned(broker, f"{base}-a1", 2)
    produce(broker, f"{base}-a1", [f"a1-{i}" for i in range(4)])
    produce(broker, f"{base}-a2", [f"a2-{i}" for i in range(3)])
    produce(broker, f"{base}-b", [f"b-{i}" for i in range(5)])
    first = sorted([f"a1-{i}" for i in range(4)] + [f"a2-{i}" for i in range(3)])
    assert _read(spark, broker, topics_pattern=f"pat-{tag}-a.*") == first  # public/default

    seen: list[str] = []

    def run() -> None:
        def collect(batch: Any, _batch_id: int) -> None:
            seen.extend(r.value.decode() for r in batch.collect())

        query = (
            spark.readStream.format("magnetar")
            .option("service_url", broker.url)
            .option("topics_pattern", f"{base}-a.*")
            .load()
            .writeStream.foreachBatch(collect)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(180)
        assert query.exception() is None

    run()
    assert sorted(seen) == first
    produce(broker, f"{base}-a3", ["a3-0", "a3-1"])
    produce(broker, f"{base}-b", ["b-late"])
    run()
    assert sorted(seen) == sorted([*first, "a3-0", "a3-1"])


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def test_starting_time_reads_what_was_published_from_then_on(
    spark: Any, broker: BrokerThread
) -> None:
    """starting_time: per partition, from its first message published at or
    after the time: partition 0 has only older messages (nothing to read),
    partition 1 both, partition 2 only newer ones (from its first entry)."""
    topic = f"persistent://public/default/since-{uuid.uuid4().hex[:8]}"
    create_partitioned(broker, topic, 3)
    produce(broker, f"{topic}-partition-0", ["old-0a", "old-0b"])
    produce(broker, f"{topic}-partition-1", ["old-1a", "old-1b", "old-1c"])
    since = _now_ms() + 1
    while _now_ms() <= since:  # every later message is published after `since`
        time.sleep(0.001)
    produce(broker, f"{topic}-partition-1", ["new-1a", "new-1b"])
    produce(broker, f"{topic}-partition-2", ["new-2a"])
    rows = _read(spark, broker, topic=topic, starting_time=str(since))
    assert rows == ["new-1a", "new-1b", "new-2a"]
    passed = {"reader.receiver_queue_size": "2"}  # executors' readers, a keyword of ours
    assert len(_read(spark, broker, topic=topic, starting_time="0", **passed)) == 8
    assert _read(spark, broker, topic=topic, starting_time=str(_now_ms() + 60_000)) == []
    with pytest.raises(Exception, match="starting_time and starting_offsets"):
        _read(spark, broker, topic=topic, starting_time="0", starting_offsets="earliest")
