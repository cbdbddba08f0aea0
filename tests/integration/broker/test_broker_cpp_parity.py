"""Behaviours the official C++ client's own suite checks against Pulsar
(`make conformance-cpp`), each driven here through the official Python
client (the same C++ core): names, refusals and the dead letter producer's
initial subscription."""

from __future__ import annotations

import uuid

import pulsar
import pytest

from tests.support.brokers import BrokerThread
from tests.support.official import official_client

Earliest = pulsar.InitialPosition.Earliest
RECEIVE_MS = 10_000


def _topic() -> str:
    return f"persistent://public/default/parity-{uuid.uuid4().hex[:8]}"


@pytest.mark.parametrize(
    "local", ["topic@%*)(&!%$#@#$><?", "::,::bf11"], ids=["punctuation", "colons-commas"]
)
def test_any_printable_local_name(broker: BrokerThread, local: str) -> None:
    """Pulsar's naming (SEMANTICS has no rule on it; the C++ suite's
    testIamSoFancyCharactersInTopicName): Pulsar checks only the tenant and namespace by
    pattern; a local name with punctuation works end to end and survives a
    restart (its ledger and cursor paths are encoded)."""
    topic = f"persistent://public/default/{local}{uuid.uuid4().hex[:6]}"
    with official_client(broker.url) as client:
        client.subscribe(topic, "weird-@%*)(&!%$#@#$><?)", initial_position=Earliest).close()
        client.create_producer(topic, batching_enabled=False).send(b"odd name")
    broker.restart()
    with official_client(broker.url) as client:
        consumer = client.subscribe(topic, "weird-@%*)(&!%$#@#$><?)")
        assert consumer.receive(timeout_millis=5000).data() == b"odd name"


def test_empty_subscription_name_is_invalid_configuration(broker: BrokerThread) -> None:
    """Pulsar answers a naming error with ProducerBusy, which the official
    client reports on subscribe as InvalidConfiguration at once, not as a
    retryable error after its operation timeout (the C++ suite's
    ConsumerTest.testNotSetSubscriptionName)."""
    with official_client(broker.url) as client, pytest.raises(pulsar.InvalidConfiguration):
        client.subscribe(_topic(), "")  # retrying would end in Timeout instead


def test_dead_letter_initial_subscription_keeps_early_messages(broker: BrokerThread) -> None:
    """CommandProducer's initial_subscription_name: the official client's dead
    letter producer asks for it, and the broker makes that subscription when
    the producer opens, so a consumer that subscribes later (at Latest) still
    gets what was dead-lettered before (the C++ suite's
    DeadLetterQueueTest.testInitSubscription)."""
    topic = _topic()
    dlq = f"{topic}-DLQ"
    policy = pulsar.ConsumerDeadLetterPolicy(
        max_redeliver_count=1, dead_letter_topic=dlq, initial_subscription_name="init"
    )
    with official_client(broker.url) as client:
        consumer = client.subscribe(
            topic,
            "s",
            consumer_type=pulsar.ConsumerType.Shared,
            dead_letter_policy=policy,
            negative_ack_redelivery_delay_ms=100,
        )
        client.create_producer(topic, batching_enabled=False).send(b"doomed")
        for _ in range(2):  # the first delivery and the one redelivery
            consumer.negative_acknowledge(consumer.receive(timeout_millis=RECEIVE_MS))
        dead = client.subscribe(dlq, "watch", initial_position=Earliest)
        assert dead.receive(timeout_millis=RECEIVE_MS).data() == b"doomed"
        late = client.subscribe(dlq, "init")  # Latest, but the subscription exists
        assert late.receive(timeout_millis=RECEIVE_MS).data() == b"doomed"
