"""GET_TOPICS_OF_NAMESPACE filtering and hashing (Pulsar's TopicList)."""

from __future__ import annotations

from magnetar.broker.service.topic_list import filter_topics, topics_hash

TOPICS = [
    "persistent://public/default/orders-partition-0",
    "persistent://public/default/orders-partition-1",
    "persistent://public/default/orders-eu",
    "non-persistent://public/default/orders-live",
    "persistent://public/default/payments",
]


def test_pattern_matches_base_names_without_domain() -> None:
    """Partitions match by their partitioned topic's name; the domain scheme
    is ignored on both sides; the match is over the whole name."""
    got = filter_topics(TOPICS, "persistent://public/default/orders.*")
    assert got == TOPICS[:4]
    assert filter_topics(TOPICS, "public/default/orders") == TOPICS[:2]
    assert filter_topics(TOPICS, "public/default/pay") == []


def test_invalid_pattern_leaves_filtering_to_the_client() -> None:
    assert filter_topics(TOPICS, "public/default/(") is None


def test_hash_ignores_order_and_sees_changes() -> None:
    assert topics_hash(TOPICS) == topics_hash(list(reversed(TOPICS)))
    assert topics_hash(TOPICS) != topics_hash(TOPICS[:-1])
    assert len(topics_hash([])) == 8
