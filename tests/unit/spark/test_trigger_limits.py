"""Issue 46.4, Spark 4.3's streaming controls: the options
max_messages_per_trigger, max_bytes_per_trigger, min_messages_per_trigger
and max_trigger_delay, parsed and checked (each error naming its option),
the one ReadLimit Spark is told, and the planning of a micro-batch's end
offsets from in-memory partitions with a fake clock."""

from __future__ import annotations

import pytest
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxFiles,
    ReadMaxRows,
    ReadMinRows,
)

from magnetar.spark_connector.admission import Admission, applied, default_limit, share
from magnetar.spark_connector.driver import Waiting
from magnetar.spark_connector.offsets import BEFORE_FIRST, Offsets, Position, after
from magnetar.spark_connector.options import OptionError
from magnetar.spark_connector.read_options import (
    DEFAULT_MAX_TRIGGER_DELAY_MS,
    ReadOptions,
    TriggerLimits,
    duration_ms,
)

OPTIONS = {"service_url": "pulsar://127.0.0.1:6650", "topic": "t"}


def _limits(**options: str) -> TriggerLimits:
    return ReadOptions.parse({**OPTIONS, **options}).limits


def test_trigger_options_parse() -> None:
    """Issue 46.4: each option's value, and the defaults (no limit; the
    delay 15 minutes, as Kafka's maxTriggerDelay)."""
    assert _limits() == TriggerLimits(None, None, None, DEFAULT_MAX_TRIGGER_DELAY_MS)
    assert DEFAULT_MAX_TRIGGER_DELAY_MS == 15 * 60 * 1000
    parsed = _limits(
        max_messages_per_trigger="500", max_bytes_per_trigger="1048576",
        min_messages_per_trigger="100", max_trigger_delay="30s",
    )  # fmt: skip
    assert parsed == TriggerLimits(500, 1_048_576, 100, 30_000)
    assert _limits(min_messages_per_trigger="500", max_messages_per_trigger="500").min_messages


@pytest.mark.parametrize(
    ("raw", "ms"),
    [("250", 250), ("250ms", 250), ("30s", 30_000), (" 2 s ", 2_000), ("5m", 300_000),
     ("5min", 300_000), ("1h", 3_600_000), ("1d", 86_400_000), ("0", 0), ("10S", 10_000)],
)  # fmt: skip
def test_durations(raw: str, ms: int) -> None:
    """Issue 46.4: max_trigger_delay takes ms, or a whole number with a unit."""
    assert duration_ms("max_trigger_delay", raw) == ms


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_bytes_per_trigger": "-1"}, "max_bytes_per_trigger must be at least 1"),
        ({"max_bytes_per_trigger": "0"}, "max_bytes_per_trigger must be at least 1"),
        ({"max_bytes_per_trigger": "1.5"}, "max_bytes_per_trigger: '1.5' is not an integer"),
        ({"max_bytes_per_trigger": "10mb"}, "max_bytes_per_trigger: '10mb' is not an integer"),
        ({"max_messages_per_trigger": "-3"}, "max_messages_per_trigger must be at least 1"),
        ({"min_messages_per_trigger": "0"}, "min_messages_per_trigger must be at least 1"),
        ({"min_messages_per_trigger": "few"}, "min_messages_per_trigger: 'few' is not an"),
        (
            {"min_messages_per_trigger": "5", "max_trigger_delay": "soon"},
            "max_trigger_delay: 'soon' is not a duration",
        ),
        (
            {"min_messages_per_trigger": "5", "max_trigger_delay": "-5s"},
            "max_trigger_delay: '-5s' is not a duration",
        ),
        (
            {"min_messages_per_trigger": "5", "max_trigger_delay": "1.5s"},
            "max_trigger_delay: '1.5s' is not a duration",
        ),
        (
            {"min_messages_per_trigger": "5", "max_trigger_delay": "3 weeks"},
            "max_trigger_delay: '3 weeks' is not a duration",
        ),
        ({"max_trigger_delay": "30s"}, "give min_messages_per_trigger too"),
        (
            {"min_messages_per_trigger": "50", "max_messages_per_trigger": "10"},
            r"min_messages_per_trigger \(50\) is more than max_messages_per_trigger \(10\)",
        ),
    ],
)
def test_bad_trigger_options_are_named(options: dict[str, str], message: str) -> None:
    """Issue 46.4: a bad value or combination fails naming the option(s)."""
    with pytest.raises(OptionError, match=message):
        ReadOptions.parse({**OPTIONS, **options})


def test_the_one_limit_spark_is_told_and_what_it_applies() -> None:
    """Issue 46.4: Spark's Python API carries one ReadLimit; the strongest
    option stands for them all, and handed back it applies them all;
    ReadAllAvailable applies none; another limit applies alone."""
    every = TriggerLimits(max_messages=50, max_bytes=4096, min_messages=10, max_delay_ms=500)
    assert default_limit(every) == ReadMinRows(10)
    assert default_limit(TriggerLimits(max_messages=50, max_bytes=9)) == ReadMaxRows(50)
    assert default_limit(TriggerLimits(max_bytes=9)) == ReadMaxBytes(9)
    assert default_limit(TriggerLimits()) == ReadAllAvailable()
    assert applied(ReadMinRows(10), every) is every
    assert applied(ReadAllAvailable(), every) == TriggerLimits()
    assert applied(ReadMaxRows(3), every) == TriggerLimits(max_messages=3)
    assert applied(ReadMaxBytes(7), every) == TriggerLimits(max_bytes=7)
    assert applied(ReadMinRows(2), every) == TriggerLimits(min_messages=2, max_delay_ms=500)
    with pytest.raises(ValueError, match="ReadMaxFiles"):
        applied(ReadMaxFiles(3), every)


class FakeBacklog:
    """A partition's messages at [1, i, -1] (i from 0) with the given sizes."""

    def __init__(self, sizes: list[int], start: Position, end: Position) -> None:
        self.messages = [
            Waiting([1, i, -1], size)
            for i, size in enumerate(sizes)
            if after([1, i, -1], start) and not after([1, i, -1], end)
        ]
        self.read = 0  # how far the planning looked
        self.closed = False

    def at(self, index: int) -> Waiting | None:
        self.read = max(self.read, index + 1)
        return self.messages[index] if index < len(self.messages) else None

    def close(self) -> None:
        self.closed = True


class Topic:
    """In-memory partitions for Admission.end: sizes per partition."""

    def __init__(self, **sizes: list[int]) -> None:
        self.sizes = sizes
        self.opened: list[FakeBacklog] = []

    def latest(self) -> Offsets:
        return {p: [1, len(s) - 1, -1] if s else BEFORE_FIRST for p, s in self.sizes.items()}

    def backlog(self, partition: str, start: Position, end: Position) -> FakeBacklog:
        opened = FakeBacklog(self.sizes[partition], start, end)
        self.opened.append(opened)
        return opened


def _counts(begin: Offsets, end: Offsets) -> dict[str, int]:
    """Messages per partition between two offsets of a Topic ([1, i, -1])."""
    return {p: end[p][1] - begin.get(p, BEFORE_FIRST)[1] for p in end}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _run(
    admission: Admission, topic: Topic, limit: ReadLimit, wait_for_min: bool = True
) -> list[dict[str, int]]:
    """Plan batches until none is due; the messages each took per partition."""
    begin: Offsets = dict.fromkeys(topic.sizes, BEFORE_FIRST)
    batches: list[dict[str, int]] = []
    for _ in range(100):
        end = admission.end(begin, topic.latest(), limit, topic.backlog, wait_for_min)
        if end == begin:
            return batches
        batches.append(_counts(begin, end))
        begin = end
    raise AssertionError(f"no end after 100 batches: {batches[:5]}...")


def test_max_bytes_bounds_each_batch_and_one_big_message_goes_alone() -> None:
    """Issue 46.4 max_bytes_per_trigger: a batch's messages sum to at most the
    limit, except a message larger than it, read alone, so no partition stalls."""
    sizes = {"a": [40, 40, 40, 500, 40], "b": [30] * 6, "c": []}
    limits = TriggerLimits(max_bytes=100)
    topic = Topic(**sizes)
    batches = _run(Admission(limits, Clock()), topic, ReadMaxBytes(100))
    taken = dict.fromkeys(sizes, 0)
    for batch in batches:
        size = sum(sum(sizes[p][taken[p] : taken[p] + n]) for p, n in batch.items())
        assert size <= 100 or sum(batch.values()) == 1, (batch, size)
        taken = {p: taken[p] + batch[p] for p in taken}
    assert taken == {"a": 5, "b": 6, "c": 0}
    assert {"a": 1, "b": 0, "c": 0} in batches  # the 500 bytes, alone
    assert all(b.closed for b in topic.opened)


def test_max_messages_shares_round_robin_and_no_partition_starves() -> None:
    """Issue 46.4 max_messages_per_trigger: a batch takes at most N messages,
    one partition after the other; with fewer than one per partition, the
    partition that goes first rotates, so every partition moves on."""
    topic = Topic(a=[1] * 10, b=[1] * 10, c=[1] * 10)
    first = _run(Admission(TriggerLimits(max_messages=2), Clock()), topic, ReadMaxRows(2))
    assert all(sum(b.values()) <= 2 for b in first) and len(first) == 15
    assert first[:3] == [
        {"a": 1, "b": 1, "c": 0},
        {"a": 0, "b": 1, "c": 1},
        {"a": 1, "b": 0, "c": 1},
    ]
    limits = TriggerLimits(max_messages=12)
    uneven = Topic(a=[1] * 2, b=[1] * 20, c=[])
    assert _run(Admission(limits, Clock()), uneven, ReadMaxRows(12))[0] == {"a": 2, "b": 10, "c": 0}


def test_both_maxima_hold_together() -> None:
    """Issue 46.4: with max_messages and max_bytes both set, the tighter one ends a batch."""
    limits = TriggerLimits(max_messages=5, max_bytes=100, min_messages=1)
    topic = Topic(a=[10] * 20, b=[60] * 3)
    batches = _run(Admission(limits, Clock()), topic, ReadMinRows(1))
    assert batches[0] == {"a": 4, "b": 1}  # 5 messages, 100 bytes
    assert all(sum(b.values()) <= 5 for b in batches)
    assert sum(b["a"] for b in batches) == 20 and sum(b["b"] for b in batches) == 3


def test_min_messages_waits_for_enough_or_the_delay() -> None:
    """Issue 46.4 min_messages_per_trigger with max_trigger_delay: no batch
    while fewer than N wait and the delay since the last batch (or the
    start) has not passed; N waiting make one at once; after the delay
    whatever waits makes one; nothing waiting makes none however long."""
    clock = Clock()
    limits = TriggerLimits(min_messages=5, max_delay_ms=2_000)
    admission = Admission(limits, clock)
    begin: Offsets = {"a": BEFORE_FIRST, "b": BEFORE_FIRST}
    topic = Topic(a=[1, 1], b=[1])

    def plan() -> Offsets:
        return admission.end(begin, topic.latest(), ReadMinRows(5), topic.backlog)

    assert plan() == begin  # 3 < 5, no delay has passed
    clock.now += 1.5
    assert plan() == begin
    topic.sizes = {"a": [1, 1, 1], "b": [1, 1]}  # 5 now
    end = plan()
    assert _counts(begin, end) == {"a": 3, "b": 2}
    begin = end
    topic.sizes = {"a": [1] * 4, "b": [1, 1]}  # one more: the delay starts anew
    clock.now += 1.5
    assert plan() == begin
    clock.now += 0.5
    end = plan()
    assert _counts(begin, end) == {"a": 1, "b": 0}
    begin = end
    clock.now += 60
    assert plan() == begin  # nothing waits
    topic.sizes = {"a": [1] * 5, "b": [1, 1]}
    assert _counts(begin, plan()) == {"a": 1, "b": 0}  # the delay has long passed


def test_min_messages_counts_no_more_than_it_needs() -> None:
    """Issue 46.4: counting toward min_messages_per_trigger reads at most N
    ids, and the batch's share what it takes and one more per partition."""
    topic = Topic(a=[1] * 50, b=[1] * 50)
    admission = Admission(TriggerLimits(min_messages=8, max_messages=8), Clock())
    begin: Offsets = {"a": BEFORE_FIRST, "b": BEFORE_FIRST}
    end = admission.end(begin, topic.latest(), ReadMinRows(8), topic.backlog)
    assert sum(_counts(begin, end).values()) == 8
    assert sum(b.read for b in topic.opened) <= 8 + 8 + 2  # not the 100 waiting


def test_available_now_and_all_available_do_not_wait() -> None:
    """Issue 46.4: an availableNow run plans what is there however little
    (it ends at the first planning without a batch); ReadAllAvailable (a
    once trigger) ignores every option."""
    limits = TriggerLimits(min_messages=100, max_messages=100, max_bytes=10)
    topic = Topic(a=[6, 6, 6])
    runs = _run(Admission(limits, Clock()), topic, ReadMinRows(100), wait_for_min=False)
    assert runs == [{"a": 1}, {"a": 1}, {"a": 1}]  # max_bytes still holds
    assert _run(Admission(limits, Clock()), Topic(a=[6, 6, 6]), ReadAllAvailable()) == [{"a": 3}]


def test_share_of_nothing() -> None:
    assert share({}, TriggerLimits(max_messages=3), 0) == {}
