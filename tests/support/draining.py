"""Receiving what a consumer has, with the blocking (pulsar-shaped) API of
the official client or of ours; reading back all a topic holds."""

from __future__ import annotations

from typing import Any

import pulsar

from tests.support.official import official_client

# Long enough for a loaded machine: a receive that times out fails the test.
RECEIVE_TIMEOUT_MS = 10_000


def receive_until_idle(consumer: Any, idle_ms: int, *, ack: bool = True) -> list[Any]:
    """Receive (and ack, unless told not to) until nothing comes for `idle_ms`."""
    got: list[Any] = []
    while True:
        try:
            msg = consumer.receive(timeout_millis=idle_ms)
        except pulsar.Timeout:
            return got
        got.append(msg)
        if ack:
            consumer.acknowledge(msg)


def receive_count(consumer: Any, count: int, *, by_id: bool = False) -> list[Any]:
    """Receive and ack `count` messages (acked by message id if `by_id`)."""
    got = []
    for _ in range(count):
        msg = consumer.receive(timeout_millis=RECEIVE_TIMEOUT_MS)
        got.append(msg)
        consumer.acknowledge(msg.message_id() if by_id else msg)
    return got


def topics_and_data(messages: list[Any]) -> list[tuple[str, bytes]]:
    """Each message's topic and payload, for tests of multi-topic consumers."""
    return [(msg.topic_name(), msg.data()) for msg in messages]


def stored_messages(url: str, topic: str, **client_options: Any) -> list[Any]:
    """Every message the topic holds, read from the earliest by the official
    client (`client_options` override official_client's)."""
    with official_client(url, **client_options) as client:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        found = []
        while reader.has_message_available():
            found.append(reader.read_next(timeout_millis=RECEIVE_TIMEOUT_MS))
        return found


def stored_payloads(url: str, topic: str, **client_options: Any) -> list[bytes]:
    """The payloads of `stored_messages`."""
    return [msg.data() for msg in stored_messages(url, topic, **client_options)]
