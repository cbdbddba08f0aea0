"""subscriptionDispatchRate through the real path: the admin REST calls, then
the official client. Each subscription of a topic gets its own quota (not one
shared by all, as dispatchRate is), the topic's value wins over its
namespace's, and a subscription's own rate (`.../{subName}/dispatchRate`)
wins over the topic's for that subscription only."""

from __future__ import annotations

import threading
import time
import uuid

import pulsar

from tests.support.brokers import BrokerThread
from tests.support.http_calls import http_call
from tests.support.official import official_client


class Arrivals:
    """When each subscription's messages arrived (the client's listener
    threads record them; the test reads them afterwards)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.times: dict[str, list[float]] = {}

    def listener(self, name: str) -> pulsar.MessageListener:
        self.times[name] = []

        def received(consumer: pulsar.Consumer, message: pulsar.Message) -> None:
            with self._lock:
                self.times[name].append(time.monotonic())
            consumer.acknowledge(message)

        return received

    def between(self, name: str, start: float, end: float) -> int:
        with self._lock:
            return sum(1 for t in self.times[name] if start <= t < end)

    def first(self, name: str) -> float:
        with self._lock:
            return self.times[name][0]


def _rate(messages: int) -> dict[str, int]:
    return {"dispatchThrottlingRateInMsg": messages, "dispatchThrottlingRateInByte": -1}


def _publish(producer: pulsar.Producer, count: int) -> None:
    for i in range(count):
        producer.send_async(b"%d" % i, None)
    producer.flush()


def test_each_subscription_has_its_own_quota(broker: BrokerThread) -> None:
    ns = f"sdr-{uuid.uuid4().hex[:6]}"
    ns_url = f"{broker.http_url}/admin/v2/namespaces/public/{ns}"
    assert http_call("PUT", ns_url) == (204, None)
    assert http_call("POST", f"{ns_url}/subscriptionDispatchRate", _rate(1000))[0] == 204
    topic = f"persistent://public/{ns}/t"
    topic_url = f"{broker.http_url}/admin/v2/persistent/public/{ns}/t"
    arrivals = Arrivals()
    with official_client(broker.url) as client:
        for name in ("a", "b"):
            client.subscribe(
                topic,
                name,
                consumer_type=pulsar.ConsumerType.Shared,
                message_listener=arrivals.listener(name),
            )
        producer = client.create_producer(topic, batching_enabled=False)
        # Set after the subscriptions exist: their first period starts with
        # the first dispatch below, not when they subscribed.
        assert http_call("POST", f"{topic_url}/subscriptionDispatchRate", _rate(10))[0] == 204
        applied = http_call("GET", f"{topic_url}/subscriptionDispatchRate?applied=true")
        assert applied[1]["dispatchThrottlingRateInMsg"] == 10
        _publish(producer, 50)
        time.sleep(0.9)
        # In the first period each gets its own 10: a shared quota would give
        # 10 between them, the namespace's 1000 all 50.
        for name in ("a", "b"):
            first = arrivals.first(name)
            assert 7 <= arrivals.between(name, first, first + 0.7) <= 13, name

        # b's own rate of 2 msg/s wins over the topic's 10, for b only.
        sub_url = f"{topic_url}/b/dispatchRate"
        assert http_call("GET", sub_url) == (200, None)
        assert http_call("POST", sub_url, _rate(2))[0] == 204
        assert http_call("GET", sub_url)[1]["dispatchThrottlingRateInMsg"] == 2
        assert http_call("GET", f"{topic_url}/a/dispatchRate?applied=true")[1] == {
            **_rate(10),
            "ratePeriodInSecond": 1,
        }
        changed = time.monotonic()
        _publish(producer, 50)
        time.sleep(1.3)
        # Past whatever was on its way when the rate changed: a about 10 in a
        # second, b about 2.
        window = (changed + 0.2, changed + 1.2)
        slowed, other = arrivals.between("b", *window), arrivals.between("a", *window)
        assert slowed <= 5 and other >= 6 and other > 2 * slowed, (slowed, other)

        assert http_call("DELETE", sub_url)[0] == 204
        assert http_call("GET", sub_url) == (200, None)
        stored = http_call("GET", f"{topic_url}/subscriptionDispatchRate")[1]
        assert stored["dispatchThrottlingRateInMsg"] == 10
        assert http_call("POST", sub_url, {"ratePeriodInSecond": 0})[0] == 400
