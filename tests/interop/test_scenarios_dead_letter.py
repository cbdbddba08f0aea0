"""Dead letter, retry and priority scenarios, each run through the official
client (`import pulsar`) and through ours (`magnetar.client`) (issue 12's
conformance set, with test_scenarios_consumer.py). What the official Python
client lacks (reconsume_later, priority_level) runs through ours only.

SEMANTICS 6.1 (amended 2026-11-26): a message reaches the application
max_redeliver_count + 1 times (redelivery counts 0 .. max), then goes to the
dead letter topic instead of coming once more: both clients alike.
"""

from __future__ import annotations

import time
from types import ModuleType
from typing import Any

import pytest

from tests.interop.conftest import (
    BrokerUnderTest,
    is_official,
    open_client,
    require_api,
)
from tests.support.polling import eventually

pytestmark = [pytest.mark.lite, pytest.mark.official]

REAL_TOPIC, ORIGIN_MESSAGE_ID, RECONSUMETIMES = "REAL_TOPIC", "ORIGIN_MESSAGE_ID", "RECONSUMETIMES"


def _sub(client: Any, api: ModuleType, topic: str, sub: str = "sub", **options: Any) -> Any:
    options.setdefault("initial_position", api.InitialPosition.Earliest)
    return client.subscribe(topic, sub, **options)


def _nothing_more(consumer: Any, api: ModuleType, timeout_ms: int = 500) -> None:
    with pytest.raises(api.Timeout):
        consumer.receive(timeout_millis=timeout_ms)


def _delivered_counts(max_redeliver_count: int) -> list[int]:
    """The redelivery counts the application sees before the dead letter
    topic (SEM-6.1)."""
    return list(range(max_redeliver_count + 1))


def test_dead_letter_after_max_nacks(broker: BrokerUnderTest, api: ModuleType) -> None:
    """SEM-6.1 / 6.3 / 6.4: nacks count through the broker's redelivery count; past
    max_redeliver_count the message goes to `<topic>-<subscription>-DLQ` with its
    properties plus REAL_TOPIC and ORIGIN_MESSAGE_ID, held by the initial
    subscription, and is acked on the original subscription."""
    topic = broker.topic("dlq")
    with open_client(api, broker.url) as client:
        consumer = _sub(
            client,
            api,
            topic,
            consumer_type=api.ConsumerType.Shared,
            negative_ack_redelivery_delay_ms=100,
            dead_letter_policy=api.ConsumerDeadLetterPolicy(2, initial_subscription_name="dlq-sub"),
        )
        client.create_producer(topic).send(b"poison", properties={"k": "v"})
        counts = []
        for _ in _delivered_counts(2):
            msg = consumer.receive(timeout_millis=5000)
            counts.append(msg.redelivery_count())
            consumer.negative_acknowledge(msg)
        assert counts == _delivered_counts(2)
        dlq = _sub(
            client, api, f"{topic}-sub-DLQ", "dlq-sub", consumer_type=api.ConsumerType.Shared
        )
        dead = dlq.receive(timeout_millis=10_000)
        assert dead.data() == b"poison"
        assert dead.properties()["k"] == "v" and dead.properties()[REAL_TOPIC] == topic
        assert ORIGIN_MESSAGE_ID in dead.properties()
        _nothing_more(consumer, api)
        consumer.close()
        _nothing_more(_sub(client, api, topic, consumer_type=api.ConsumerType.Shared), api)


def test_dead_letter_after_ack_timeouts(broker: BrokerUnderTest, api: ModuleType) -> None:
    """SEM-3.6, SEM-6.1 / 6.3: ack timeouts count through the broker's redelivery
    count too; past max_redeliver_count (1) the message goes to the named
    dead_letter_topic. The official client's ack timeout is at least 10 s, so
    its run (about 20 s: one ack-timeout redelivery it hands out, then the
    dead letter) is made against our broker only; ours uses 1 s."""
    if is_official(api) and broker.magnetar is None:
        pytest.skip("official client: 10 s ack timeouts, run against our broker only")
    topic = broker.topic("dlqtimeout")
    timeout_ms = 10_000 if is_official(api) else 1000
    with open_client(api, broker.url) as client:
        consumer = _sub(
            client,
            api,
            topic,
            consumer_type=api.ConsumerType.Shared,
            unacked_messages_timeout_ms=timeout_ms,
            dead_letter_policy=api.ConsumerDeadLetterPolicy(1, dead_letter_topic=f"{topic}-dead"),
        )
        dlq = _sub(client, api, f"{topic}-dead", "dlq")
        client.create_producer(topic).send(b"slow")
        counts = [
            consumer.receive(timeout_millis=3 * timeout_ms).redelivery_count()
            for _ in _delivered_counts(1)
        ]  # never acked
        assert counts == _delivered_counts(1)
        dead = dlq.receive(timeout_millis=3 * timeout_ms)
        assert dead.data() == b"slow" and dead.properties()[REAL_TOPIC] == topic
        _nothing_more(consumer, api)


def test_reconsume_later_counts_then_dead_letters(broker: BrokerUnderTest, api: ModuleType) -> None:
    """SEM-6.2 / 6.3 (ours only, SEM-10.2): reconsume_later publishes a copy to
    `<topic>-<subscription>-RETRY` delivered after the delay, RECONSUMETIMES
    counting up; past max_redeliver_count it goes to the dead letter topic."""
    require_api(api, "reconsume_later")
    broker.require("delayed_delivery")
    topic = broker.topic("retry")
    delay_ms = 300
    with open_client(api, broker.url) as client:
        consumer = _sub(
            client,
            api,
            topic,
            consumer_type=api.ConsumerType.Shared,
            enable_retry=True,
            dead_letter_policy=api.ConsumerDeadLetterPolicy(2, initial_subscription_name="dlq-sub"),
        )
        dlq = _sub(client, api, f"{topic}-sub-DLQ", "dlq-sub")
        client.create_producer(topic).send(b"later", properties={"k": "v"})
        msg = consumer.receive(timeout_millis=5000)
        for times in (1, 2):
            sent = time.monotonic()
            consumer.reconsume_later(msg, delay_ms)
            msg = consumer.receive(timeout_millis=10_000)
            assert time.monotonic() - sent >= delay_ms / 1000 * 0.9  # the delay is a minimum
            assert msg.properties()[RECONSUMETIMES] == str(times)
            assert msg.properties()[REAL_TOPIC] == topic and msg.properties()["k"] == "v"
            assert msg.topic_name() == f"{topic}-sub-RETRY"
        consumer.reconsume_later(msg, delay_ms)
        dead = dlq.receive(timeout_millis=10_000)
        assert dead.data() == b"later" and dead.properties()[RECONSUMETIMES] == "3"
        _nothing_more(consumer, api)


def test_shared_priority_levels(broker: BrokerUnderTest, api: ModuleType) -> None:
    """SEM-4.3 (ours only, SEM-10.2): C1 (priority 0, 2 permits), C2 (0, 1),
    C3 (0, 1), C4 (1, 2), C5 (1, 1) are dispatched C1 C2 C3 C1 C4 C5 C4."""
    require_api(api, "priority_level")
    broker.require("priority")
    topic = broker.topic("priority")
    plan = [("C1", 0, 2), ("C2", 0, 1), ("C3", 0, 1), ("C4", 1, 2), ("C5", 1, 1)]
    with open_client(api, broker.url) as client:
        consumers = {
            name: client.subscribe(
                topic,
                "prio",
                consumer_type=api.ConsumerType.Shared,
                consumer_name=name,
                receiver_queue_size=permits,
                priority_level=level,
            )
            for name, level, permits in plan
        }
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(7):
            producer.send(b"%d" % i)
        # Every entry is dispatched before a receive frees a permit.
        eventually(
            "all 7 dispatched",
            lambda: sum(len(c._buffer or ()) for c in consumers.values()) == 7,
            timeout=10,
        )
        owner = {}
        for name, _, permits in plan:
            for _ in range(permits):
                owner[int(consumers[name].receive(timeout_millis=5000).data())] = name
        assert [owner[i] for i in range(7)] == ["C1", "C2", "C3", "C1", "C4", "C5", "C4"]
