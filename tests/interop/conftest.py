"""Brokers the client suite runs against: pulsar-lite and our own broker;
and the two client modules the scenario tests run through.

`broker` is parametrised over both, so every client test runs against each;
a feature one of them lacks is skipped there with the reason
(`broker.require(...)`). pulsar-lite runs as a subprocess (tests/support/lite),
ours as a BrokerServer on a background thread (tests/support/brokers),
each on a free port with its own data directory.

`api` is parametrised over `pulsar` (the official client) and
`magnetar.client`: a scenario written against the official module's API runs
through each; what the official Python client lacks is skipped there
(`require_api(api, ...)`, OFFICIAL_LACKS).
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pulsar
import pytest

import magnetar.client as magnetar_client
from magnetar.client.aio import Client
from tests.support.brokers import BrokerThread, broker_config
from tests.support.http_calls import http_call
from tests.support.lite import PulsarLite
from tests.support.official import official_client

# What pulsar-lite does not do (probed: see tests/support/lite.py).
LITE_LACKS = {
    "dedup": "pulsar-lite has no deduplication (last_sequence_id is always -1)",
    "access_modes": "pulsar-lite ignores producer access modes (two Exclusive producers coexist)",
    "max_message_size": "pulsar-lite does not advertise max_message_size in CONNECTED",
    "wait_for_exclusive": "pulsar-lite ignores producer access modes",
    "priority": "pulsar-lite does not dispatch by priority_level (SEM-4.3 example: "
    "C2 C3 C1 C1 ... instead of C1 C2 C3 C1 ...)",
    "seek": "pulsar-lite answers SEEK but sends nothing from the new position "
    "(the official client gets nothing either)",
    "delayed_delivery": "pulsar-lite delivers deliver_at_time messages at once",
    "reader_latest_available": "pulsar-lite: a reader started at latest keeps answering "
    "has_message_available False after a new message (the official client too)",
    "topics_of_namespace": "pulsar-lite does not answer GET_TOPICS_OF_NAMESPACE "
    "(regex subscriptions cannot list topics)",
    "foreign_start_position": "pulsar-lite starts a partition's reader at the end when the "
    "start id's ledger is not one of that partition's, yet has_message_available says True "
    "(the official client sees the same)",
    "redeliver_all": "pulsar-lite sends nothing again after a REDELIVER_UNACKNOWLEDGED_MESSAGES "
    "without ids (our broker passes the same test)",
    "batch_index_ack": "pulsar-lite takes an ack of some indexes of a batch for the whole entry "
    "(nothing of it comes again; the official client sees the same)",
    "active_consumer_change": "pulsar-lite sends no ACTIVE_CONSUMER_CHANGE to Failover consumers",
    "failover_priority": "pulsar-lite ignores priority_level on Failover (a lower-priority "
    "consumer that subscribed first stays active)",
    "admin_stats": "pulsar-lite has no admin API (a subscription's backlog cannot be read)",
}
# What the official Python client (pulsar-client 3.x) does not offer (SEM-10.2).
OFFICIAL_LACKS = {
    "priority_level": "the official Python client has no priority_level on subscribe",
    "reconsume_later": "the official Python client has no retry topics (reconsume_later)",
    "active_consumer_listener": "the official Python client's subscribe takes no "
    "active-consumer (consumer event) listener",
}
MAGNETAR_LACKS: dict[str, str] = {}
PARTITIONS = 4
_names = itertools.count()


@dataclass
class BrokerUnderTest:
    kind: str
    url: str
    lacks: dict[str, str]
    lite_partitioned: PulsarLite | None = None
    magnetar: BrokerThread | None = None
    partitioned_topics: set[str] = field(default_factory=set)

    def require(self, feature: str) -> None:
        if feature in self.lacks:
            pytest.skip(self.lacks[feature])

    def backlog(self, topic: str, subscription: str) -> int:
        """The subscription's backlog as our broker's admin API reports it."""
        self.require("admin_stats")
        assert self.magnetar is not None
        path = topic.removeprefix("persistent://")
        url = f"{self.magnetar.http_url}/admin/v2/persistent/{path}/stats"
        status, stats = http_call("GET", url)
        assert status == 200, stats
        return int(stats["subscriptions"][subscription]["msgBacklog"])

    def topic(self, prefix: str = "t") -> str:
        return f"persistent://public/default/{prefix}-{self.kind}-{next(_names)}"

    def partitioned_topic(self, prefix: str = "pt") -> tuple[str, str]:
        """(service URL, topic) of a topic with PARTITIONS partitions."""
        topic = self.topic(prefix)
        if self.magnetar is not None:
            assert self.magnetar.server is not None and self.magnetar.server.service is not None
            self.magnetar.call(
                self.magnetar.server.service.create_partitioned_topic(topic, PARTITIONS)
            )
            return self.url, topic
        # pulsar-lite makes every new topic partitioned when so configured.
        assert self.lite_partitioned is not None
        return self.lite_partitioned.url, topic


@pytest.fixture(scope="session")
def lite_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PulsarLite]:
    # pulsar-lite does not advertise its limit, so the official client cuts chunks
    # of a full 5 MiB plus headers: give it the headroom a Pulsar broker has.
    limit = 5 * 1024 * 1024 + 16 * 1024
    with PulsarLite(tmp_path_factory.mktemp("lite"), max_message_size=limit) as lite:
        yield lite


@pytest.fixture(scope="session")
def lite_partitioned_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PulsarLite]:
    with PulsarLite(tmp_path_factory.mktemp("lite-pt"), default_partitions=PARTITIONS) as lite:
        yield lite


@pytest.fixture(scope="session")
def magnetar_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    broker = BrokerThread(broker_config(tmp_path_factory.mktemp("magnetar"), sync_policy="none"))
    broker.start()
    yield broker
    broker.stop()


@pytest.fixture(params=["pulsar-lite", "magnetar"])
def broker(request: pytest.FixtureRequest) -> BrokerUnderTest:
    if request.param == "pulsar-lite":
        lite: PulsarLite = request.getfixturevalue("lite_broker")
        return BrokerUnderTest(
            "lite",
            lite.url,
            LITE_LACKS,
            lite_partitioned=request.getfixturevalue("lite_partitioned_broker"),
        )
    magnetar: BrokerThread = request.getfixturevalue("magnetar_broker")
    return BrokerUnderTest("magnetar", magnetar.url, MAGNETAR_LACKS, magnetar=magnetar)


@pytest.fixture(params=["pulsar-lite", "magnetar"])
def restartable_broker(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[PulsarLite | BrokerThread]:
    """A broker of the test's own, to kill and restart on the same port and data."""
    if request.param == "pulsar-lite":
        with PulsarLite(tmp_path / "lite") as lite:
            yield lite
        return
    broker = BrokerThread(
        broker_config(tmp_path / "magnetar", sync_policy="none", broker_deduplication_enabled=True)
    ).start()
    yield broker
    broker.stop()


@pytest.fixture
def ours(broker: BrokerUnderTest) -> Iterator[magnetar_client.Client]:
    """Our blocking client on `broker`."""
    client = magnetar_client.Client(broker.url, operation_timeout_seconds=10)
    yield client
    client.close()


@pytest.fixture(params=["official", "magnetar"])
def api(request: pytest.FixtureRequest) -> ModuleType:
    """The client module a scenario runs through."""
    return pulsar if request.param == "official" else magnetar_client


def is_official(api: ModuleType) -> bool:
    return api is pulsar


def require_api(api: ModuleType, feature: str) -> None:
    if is_official(api) and feature in OFFICIAL_LACKS:
        pytest.skip(OFFICIAL_LACKS[feature])


@pytest.fixture
async def client(broker: BrokerUnderTest) -> AsyncIterator[Client]:
    """Our asyncio client for the broker under test, closed after the test."""
    async with Client(broker.url, operation_timeout_seconds=5) as c:
        yield c


@contextmanager
def open_client(api: ModuleType, url: str) -> Iterator[Any]:
    """A blocking client of `api` for `url`, closed on exit."""
    if is_official(api):
        with official_client(url) as client:
            yield client
        return
    client = magnetar_client.Client(url, operation_timeout_seconds=10)
    try:
        yield client
    finally:
        client.close()
