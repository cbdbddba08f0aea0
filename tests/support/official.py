"""The official `pulsar-client`, set up for tests: short timeouts, quiet logs."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pulsar

# The C++ core logs every connection event at INFO; keep test output readable.
_LOGGER = logging.getLogger("tests.official-client")
_LOGGER.setLevel(logging.WARNING)


@contextmanager
def official_client(url: str, **options: Any) -> Iterator[Any]:
    """A `pulsar.Client` for `url`, closed on exit; options override the defaults."""
    settings: dict[str, Any] = {
        "operation_timeout_seconds": 10,
        "connection_timeout_ms": 5000,
        "logger": _LOGGER,
    }
    settings.update(options)
    client = pulsar.Client(url, **settings)
    try:
        yield client
    finally:
        client.close()


def assert_serves(url: str, topic: str) -> None:
    """A normal official client produces and consumes on `topic`: what a
    broker must still do for others after a client misbehaved."""
    with official_client(url) as client:
        consumer = client.subscribe(topic, "bystander")
        producer = client.create_producer(topic)
        producer.send(b"still served")
        msg = consumer.receive(timeout_millis=5000)
        assert msg.data() == b"still served"
        consumer.acknowledge(msg)
