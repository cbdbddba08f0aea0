"""The routes every declared policy gets (issue 43): at each level it
exists at, GET answers Pulsar's unset value, a good value is stored in its
normal form, a bad one is refused with Pulsar's 400 or 412 and a reason
(never a 500), DELETE inherits again; a topic-level GET with applied=true
answers topic > namespace > broker. The `magnetar admin` commands reach any
policy by its REST name."""

from __future__ import annotations

import subprocess
import sys
import uuid
from typing import Any

import pytest

from magnetar.broker.policies.catalog import POLICIES, Policy
from tests.support.brokers import BrokerThread
from tests.support.http_calls import http_call

# A good value, what GET answers after it, and a bad value with its status.
SAMPLES: dict[str, tuple[Any, Any, Any, int]] = {
    "deduplication": (True, True, "yes", 400),
    "dedup_key_window": (
        {"window": "10m"},
        {"window": "600000ms", "maxKeys": 100000, "property": "idempotency-key"},
        {"window": "soon"},
        400,
    ),
    "publish_rate": (
        {"publishThrottlingRateInMsg": 10},
        {"publishThrottlingRateInMsg": 10, "publishThrottlingRateInByte": -1},
        {"publishThrottlingRateInMsg": "many"},
        400,
    ),
    "dispatch_rate": (
        {"dispatchThrottlingRateInMsg": 5, "ratePeriodInSecond": 2},
        {
            "dispatchThrottlingRateInMsg": 5,
            "dispatchThrottlingRateInByte": -1,
            "ratePeriodInSecond": 2,
        },
        {"ratePeriodInSecond": 0},
        400,
    ),
    "subscription_dispatch_rate": (
        {"dispatchThrottlingRateInMsg": 7},
        {
            "dispatchThrottlingRateInMsg": 7,
            "dispatchThrottlingRateInByte": -1,
            "ratePeriodInSecond": 1,
        },
        {"dispatchThrottlingRateInByte": "lots"},
        400,
    ),
    "replicator_dispatch_rate": (
        {"dispatchThrottlingRateInMsg": 20, "ratePeriodInSecond": 3},
        {
            "dispatchThrottlingRateInMsg": 20,
            "dispatchThrottlingRateInByte": -1,
            "ratePeriodInSecond": 3,
        },
        {"ratePeriodInSecond": -1},
        400,
    ),
    "compaction_threshold": (2000, 2000, -1, 412),
    "schema_compatibility": ("BACKWARD", "BACKWARD", "SIDEWAYS", 400),
    "schema_validation_enforced": (True, True, 1, 400),
    "retention": (
        {"retentionTimeInMinutes": 10, "retentionSizeInMB": -1},
        {"retentionTimeInMinutes": 10, "retentionSizeInMB": -1},
        {"retentionTimeInMinutes": -5},
        412,
    ),
    "message_ttl": (60, 60, -1, 412),
    "backlog_quota": (
        {"limitSize": 1000, "policy": "producer_exception"},
        {
            "destination_storage": {
                "limitSize": 1000,
                "limitTime": -1,
                "policy": "producer_exception",
            }
        },
        {"limitSize": 1000, "policy": "drop_everything"},
        400,
    ),
    "max_producers": (3, 3, -1, 412),
    "max_consumers": (3, 3, "three", 400),
    "max_subscriptions": (3, 3, -2, 412),
    "max_consumers_per_subscription": (2, 2, 1.5, 400),
    "subscription_types_enabled": (["Shared", "Exclusive"], ["Exclusive", "Shared"], ["Any"], 400),
    "delayed_delivery": (
        {"active": False, "tickTime": 500},
        {"active": False, "tickTime": 500, "maxDeliveryDelayInMillis": 0},
        {"active": "no"},
        400,
    ),
    "max_message_size": (1024, 1024, -1, 412),
    "auto_subscription_creation": (
        {"allowAutoSubscriptionCreation": False},
        {"allowAutoSubscriptionCreation": False},
        {},
        400,
    ),
    "auto_topic_creation": (
        {"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 2},
        {"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 2},
        {"allowAutoTopicCreation": True, "topicType": "partitioned"},
        400,
    ),
    "max_topics_per_namespace": (10, 10, -1, 412),
    "encryption_required": (True, True, "always", 400),
    "allow_auto_update_schema": (False, False, "no", 400),
    "max_unacked_on_consumer": (5, 5, -1, 412),
    "max_unacked_on_subscription": (20, 20, "many", 400),
    "subscribe_rate": (
        {"subscribeThrottlingRatePerConsumer": 2},
        {"subscribeThrottlingRatePerConsumer": 2, "ratePeriodInSecond": 30},
        {"subscribeThrottlingRatePerConsumer": "two"},
        400,
    ),
    "dedup_snapshot_interval": (60, 60, -1, 412),
    "inactive_topic_policies": (
        {
            "inactiveTopicDeleteMode": "delete_when_subscriptions_caught_up",
            "deleteWhileInactive": True,
        },
        {
            "inactiveTopicDeleteMode": "delete_when_subscriptions_caught_up",
            "maxInactiveDurationSeconds": 0,
            "deleteWhileInactive": True,
        },
        {"inactiveTopicDeleteMode": "delete_sometimes"},
        400,
    ),
    "subscription_expiration_time": (30, 30, -1, 412),
    "replication_clusters": (["standalone"], ["standalone"], ["standalone", "global"], 412),
}


def test_every_declared_policy_has_a_sample() -> None:
    """A policy declared without a sample here would go untested."""
    assert {p.name for p in POLICIES} == set(SAMPLES)


def _check_level(base: str, path: str, setter: str, policy: Policy) -> None:
    good, stored, bad, status = SAMPLES[policy.name]
    read = f"{base}/{policy.read_path or path}"
    assert http_call("GET", read) == (200, policy.unset)
    code, body = http_call(setter, f"{base}/{path}", bad)
    assert code == status and body["reason"], (policy.name, code, body)
    assert http_call(setter, f"{base}/{path}", good) == (204, None), policy.name
    assert http_call("GET", read) == (200, stored), policy.name
    assert http_call("DELETE", f"{base}/{path}") == (204, None)
    assert http_call("GET", read) == (200, policy.unset), policy.name


@pytest.mark.parametrize("policy", POLICIES, ids=[p.name for p in POLICIES])
def test_policy_routes_at_each_level(broker: BrokerThread, policy: Policy) -> None:
    ns = f"pr-{uuid.uuid4().hex[:6]}"
    ns_base = f"{broker.http_url}/admin/v2/namespaces/public/{ns}"
    assert http_call("PUT", ns_base) == (204, None)
    if policy.namespace_path is not None:
        _check_level(ns_base, policy.namespace_path, policy.namespace_set[0], policy)
    if policy.topic_path is not None:
        for domain in ("persistent", "non-persistent"):
            topic_base = f"{broker.http_url}/admin/v2/{domain}/public/{ns}/t"
            _check_level(topic_base, policy.topic_path, policy.topic_set[0], policy)


def test_namespace_schema_strategy_unset_is_undefined(broker: BrokerThread) -> None:
    """Pulsar's GET of a namespace's schemaCompatibilityStrategy answers
    "UNDEFINED" while unset (the route was registered twice before, and the
    copy answering null won); PUT sets it, PUT UNDEFINED removes it."""
    ns = f"public/sc-{uuid.uuid4().hex[:6]}"
    url = f"{broker.http_url}/admin/v2/namespaces/{ns}/schemaCompatibilityStrategy"
    assert http_call("PUT", f"{broker.http_url}/admin/v2/namespaces/{ns}") == (204, None)
    assert http_call("GET", url) == (200, "UNDEFINED")
    assert http_call("PUT", url, "FULL") == (204, None)
    assert http_call("GET", url) == (200, "FULL")
    assert http_call("PUT", url, "UNDEFINED") == (204, None)
    assert http_call("GET", url) == (200, "UNDEFINED")


def test_applied_is_topic_then_namespace_then_broker(broker: BrokerThread) -> None:
    """GET ...?applied=true: the broker's value (maxProducers 0), then the
    namespace's, then the topic's; removing the topic's falls back."""
    ns = f"public/ap-{uuid.uuid4().hex[:6]}"
    base = f"{broker.http_url}/admin/v2"
    topic = f"{base}/persistent/{ns}/t/maxProducers"
    assert http_call("PUT", f"{base}/namespaces/{ns}") == (204, None)
    assert http_call("GET", f"{topic}?applied=true") == (200, 0)
    assert http_call("POST", f"{base}/namespaces/{ns}/maxProducersPerTopic", 5) == (204, None)
    assert http_call("GET", f"{topic}?applied=true") == (200, 5)
    assert http_call("POST", topic, 2) == (204, None)
    assert http_call("GET", f"{topic}?applied=true") == (200, 2)
    assert http_call("GET", topic) == (200, 2)
    assert http_call("DELETE", topic) == (204, None)
    assert http_call("GET", f"{topic}?applied=true") == (200, 5)
    assert http_call("GET", topic) == (200, None)


def test_keyed_backlog_quota_entries(broker: BrokerThread) -> None:
    """backlogQuota entries are set and removed one type at a time; an
    unknown backlogQuotaType is 400."""
    ns = f"public/bq-{uuid.uuid4().hex[:6]}"
    base = f"{broker.http_url}/admin/v2/namespaces/{ns}"
    assert http_call("PUT", base) == (204, None)
    age = {"limitTime": 30, "policy": "consumer_backlog_eviction"}
    assert http_call("POST", f"{base}/backlogQuota?backlogQuotaType=message_age", age)[0] == 204
    size = {"limitSize": 10, "policy": "producer_request_hold"}
    assert http_call("POST", f"{base}/backlogQuota", size)[0] == 204
    assert set(http_call("GET", f"{base}/backlogQuotaMap")[1]) == {
        "message_age",
        "destination_storage",
    }
    assert http_call("DELETE", f"{base}/backlogQuota?backlogQuotaType=message_age")[0] == 204
    assert set(http_call("GET", f"{base}/backlogQuotaMap")[1]) == {"destination_storage"}
    assert http_call("POST", f"{base}/backlogQuota?backlogQuotaType=weight", size)[0] == 400


def _magnetar(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "magnetar.client.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_cli_reaches_policies_by_rest_name(broker: BrokerThread) -> None:
    """`magnetar admin {namespaces,topics} {set,get,remove}-policy`: any
    declared policy by its REST name, the value as JSON; a bad value exits 1
    with the broker's reason."""
    cli = ["admin", "--admin-url", broker.http_url]
    ns = f"public/cp-{uuid.uuid4().hex[:6]}"
    topic = f"persistent://{ns}/t"
    assert _magnetar(*cli, "namespaces", "create", ns).returncode == 0
    ran = _magnetar(*cli, "namespaces", "set-policy", ns, "maxConsumersPerTopic", "4")
    assert ran.returncode == 0, ran.stderr
    assert _magnetar(*cli, "topics", "get-policy", topic, "maxConsumers", "--applied").stdout == (
        "4\n"
    )
    ran = _magnetar(
        *cli, "topics", "set-policy", topic, "backlogQuota", '{"limitTime": 5}',
        "--param", "backlogQuotaType=message_age",
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    got = http_call("GET", f"{broker.http_url}/admin/v2/persistent/{ns}/t/backlogQuotaMap")[1]
    assert got["message_age"]["limitTime"] == 5
    ran = _magnetar(*cli, "topics", "set-policy", topic, "messageTTL", "--", "-3")
    assert ran.returncode == 1 and "at least 0" in ran.stderr
    ran = _magnetar(*cli, "namespaces", "remove-policy", ns, "maxConsumersPerTopic")
    assert ran.returncode == 0, ran.stderr
    assert _magnetar(*cli, "namespaces", "get-policy", ns, "maxConsumersPerTopic").stdout == ""
