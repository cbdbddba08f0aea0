"""Topics for the Spark connector's tests, created and filled around the
connector: through the admin API and the official client."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tests.support.brokers import BrokerThread
from tests.support.http_calls import http_call
from tests.support.official import official_client


def create_partitioned(broker: BrokerThread, topic: str, partitions: int) -> None:
    url = f"{broker.http_url}/admin/v2/{topic.replace('://', '/')}/partitions"
    assert http_call("PUT", url, partitions)[0] == 204


def produce(
    broker: BrokerThread,
    topic: str,
    values: Iterable[str],
    *,
    keyed: bool = True,
    with_property: bool = False,
    pad_to: int = 0,
) -> list[Any]:
    """Send each value as one message, unbatched, so each is an entry of its
    own; keyed by the value itself if `keyed` (spreads a partitioned topic),
    with the property v=value if `with_property`, padded with dots to `pad_to`
    bytes. The ids, in order."""
    with official_client(broker.url) as client:
        producer = client.create_producer(topic, batching_enabled=False)
        options: dict[str, Any] = {}
        ids = []
        for value in values:
            if keyed:
                options["partition_key"] = value
            if with_property:
                options["properties"] = {"v": value}
            ids.append(producer.send(value.encode().ljust(pad_to, b"."), **options))
        return ids
