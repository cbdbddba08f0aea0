"""The official client's key-to-partition routing equals `partition_for_key`.

The Python `pulsar-client` routes keyed messages with the C++ client's default
hashing scheme (BoostHash), which it does not let users change; Magnetar's
client must place keys on the same partitions so both can share a topic.
"""

from __future__ import annotations

import random

import pytest

from magnetar.proto.hashes import HashingScheme, partition_for_key
from magnetar.proto.naming import TopicName
from tests.support.fake_broker import FakeBroker
from tests.support.official import official_client

pytestmark = pytest.mark.official

PARTITION_COUNTS = (3, 5, 7, 16)
ALPHABET = "abcXYZ019-_:/ üßéж日本語€😀"


def _keys() -> list[str]:
    rng = random.Random(20240611)
    keys = ["Order-3459134", "a", "ü", "日本語", "😀", "exactly8", "sixteen-chars-ok"]
    keys += ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 40))) for _ in range(60)]
    return keys


def test_official_client_routes_keys_by_boost_hash() -> None:
    topics = {f"persistent://public/default/routing-{n}": n for n in PARTITION_COUNTS}
    keys = _keys()
    with FakeBroker(partitions=topics) as broker, official_client(broker.url) as client:
        for topic in topics:
            producer = client.create_producer(topic, batching_enabled=False)
            for key in keys:
                producer.send_async(key.encode(), None, partition_key=key)
            producer.flush()
            producer.close()
        sends = broker.wait_for_sends(len(topics) * len(keys))

    mismatches = []
    for send in sends:
        name = TopicName.parse(send.topic)
        n = topics[str(name.partitioned_base)]
        key = send.metadata.partition_key
        assert send.payload == key.encode()
        expected = partition_for_key(key, n, HashingScheme.BoostHash)
        if name.partition_index != expected:
            mismatches.append((key, n, name.partition_index, expected))
    assert mismatches == []
    # Every partition got keys: the check above was not vacuous.
    assert {s.topic for s in sends} == {
        str(TopicName.parse(t).partition(i)) for t, n in topics.items() for i in range(n)
    }


def test_official_client_routes_empty_key_round_robin() -> None:
    """An empty partition key is no key: successive sends move across partitions."""
    topic = "persistent://public/default/routing-empty"
    with FakeBroker(partitions={topic: 4}) as broker, official_client(broker.url) as client:
        producer = client.create_producer(topic, batching_enabled=False)
        for _ in range(8):
            producer.send(b"x", partition_key="")
        sends = broker.wait_for_sends(8)
        producer.close()
    assert all(not s.metadata.HasField("partition_key") for s in sends)
    assert len({s.topic for s in sends}) == 4
