"""Namespace bundles (hash ranges of topic names) and the load manager's
choice of a broker for an unowned bundle."""

from __future__ import annotations

import itertools

import pytest

from magnetar.broker.cluster.brokers import BrokerInfo, BundleOwner, LoadReport, least_loaded
from magnetar.broker.cluster.bundles import (
    HASH_SPACE,
    bundle_of,
    bundles_of,
    parse_range,
    topic_hash,
)
from magnetar.proto.naming import TopicName


def test_bundles_cover_the_hash_space_without_gaps() -> None:
    for count in (1, 3, 4, 16):
        bundles = bundles_of("public/default", count)
        assert len(bundles) == count
        assert bundles[0].lower == 0 and bundles[-1].upper == HASH_SPACE
        assert all(a.upper == b.lower for a, b in itertools.pairwise(bundles))


def test_a_topic_falls_in_the_bundle_of_its_hash_and_partitions_spread() -> None:
    name = TopicName.parse("persistent://public/default/orders")
    bundle = bundle_of(name, 4)
    assert bundle.lower <= topic_hash(name) < bundle.upper
    partitions = {bundle_of(name.partition(i), 4) for i in range(32)}
    assert len(partitions) > 1


def test_bundle_names_round_trip_in_pulsar_form() -> None:
    bundles = bundles_of("t/ns", 4)
    assert bundles[0].range_name == "0x00000000_0x40000000"
    assert bundles[-1].range_name == "0xc0000000_0xffffffff"
    for bundle in bundles:
        assert parse_range("t/ns", bundle.range_name, 4) == bundle
    with pytest.raises(ValueError):
        parse_range("t/ns", "0x00000000_0x80000000", 4)


def _broker(broker_id: str, topics: int = 0) -> BrokerInfo:
    return BrokerInfo(broker_id, f"pulsar://{broker_id}", "", "", 1, LoadReport(topics=topics))


def _owner(broker_id: str) -> BundleOwner:
    return BundleOwner.of(_broker(broker_id))


def test_least_loaded_prefers_fewest_bundles_then_fewest_topics() -> None:
    brokers = [_broker("a", topics=1), _broker("b", topics=9), _broker("c", topics=0)]
    bundle = bundles_of("public/default", 4)[0]
    owners = {"x/1": _owner("c"), "x/2": _owner("c"), "x/3": _owner("b")}
    chosen = least_loaded(bundle, brokers, owners)
    assert chosen is not None and chosen.broker_id == "a"
    chosen = least_loaded(bundle, brokers, owners, exclude="a")
    assert chosen is not None and chosen.broker_id == "b"
    assert least_loaded(bundle, [_broker("a")], {}, exclude="a") is None


def test_equal_brokers_share_bundles() -> None:
    brokers = [_broker(f"b{i}") for i in range(3)]
    picks = {least_loaded(b, brokers, {}) for b in bundles_of("public/default", 16)}
    assert len(picks) > 1


def test_broker_info_round_trips() -> None:
    info = BrokerInfo("h:1", "pulsar://h:1", "pulsar+ssl://h:2", "http://h:3", 7, LoadReport(3))
    assert BrokerInfo.decode(info.encode()) == info
    owner = BundleOwner.of(info)
    assert BundleOwner.decode(owner.encode()) == owner
