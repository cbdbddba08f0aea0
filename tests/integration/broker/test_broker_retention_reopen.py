"""A topic opens with its namespace's retention: consumed messages a
retention policy keeps are still there after a restart (the first trim after
opening must not follow the broker default, which keeps nothing consumed)."""

from __future__ import annotations

import pulsar

from tests.support.brokers import BrokerThread
from tests.support.http_calls import http_call
from tests.support.official import official_client

TOPIC = "persistent://public/default/kept"


def test_consumed_messages_kept_by_retention_survive_a_restart(broker: BrokerThread) -> None:
    url = f"{broker.http_url}/admin/v2/namespaces/public/default/retention"
    body = {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}
    assert http_call("POST", url, body) == (204, None)
    with official_client(broker.url) as client:
        consumer = client.subscribe(TOPIC, "all")
        producer = client.create_producer(TOPIC)
        for i in range(10):
            producer.send(str(i).encode())
        for _ in range(10):
            consumer.acknowledge(consumer.receive(10_000))
        consumer.close()
    broker.restart()
    with official_client(broker.url) as client:
        reader = client.create_reader(TOPIC, pulsar.MessageId.earliest)
        got = []
        while reader.has_message_available():
            got.append(reader.read_next(10_000).data().decode())
    assert got == [str(i) for i in range(10)]
