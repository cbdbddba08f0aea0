"""SharedPolicies (broker/service/apply.py): topics without policies of their
own share their namespace's resolved values, for as long as the namespace's
policies and the broker's defaults are the ones they came from."""

from __future__ import annotations

from typing import Any

from magnetar.broker.policies.resolver import PolicyDefaults, TopicPolicies
from magnetar.broker.service.apply import AppliedPolicies, SharedPolicies
from magnetar.proto.naming import TopicName

DEFAULTS = PolicyDefaults(deduplication_enabled=True)


def _policies(
    topic: str,
    own: dict[str, Any] | None = None,
    namespace: dict[str, Any] | None = None,
    defaults: PolicyDefaults = DEFAULTS,
) -> TopicPolicies:
    name = TopicName.parse(f"persistent://public/default/{topic}")
    return TopicPolicies(name, own or {}, {} if namespace is None else namespace, defaults)


def test_topics_without_policies_of_their_own_share_one_resolution() -> None:
    shared = SharedPolicies()
    first = shared.of(_policies("a", namespace={"message_ttl_in_seconds": 60}))
    second = shared.of(_policies("b", namespace={"message_ttl_in_seconds": 60}))
    assert second is first
    assert first.message_ttl_s == 60
    assert first.deduplication_enabled  # the broker's default


def test_a_changed_namespace_or_new_defaults_resolve_again() -> None:
    shared = SharedPolicies()
    before = shared.of(_policies("a", namespace={"message_ttl_in_seconds": 60}))
    changed = shared.of(_policies("a", namespace={"message_ttl_in_seconds": 30}))
    assert changed.message_ttl_s == 30
    other = PolicyDefaults(deduplication_enabled=False)
    redone = shared.of(_policies("a", namespace={"message_ttl_in_seconds": 30}, defaults=other))
    assert not redone.deduplication_enabled
    assert before.message_ttl_s == 60  # what was handed out stays as it was


def test_a_topic_with_its_own_policies_is_resolved_for_itself() -> None:
    shared = SharedPolicies()
    namespace = {"message_ttl_in_seconds": 60}
    plain = shared.of(_policies("a", namespace=namespace))
    own = shared.of(_policies("b", own={"messageTTLInSeconds": 5}, namespace=namespace))
    assert own.message_ttl_s == 5
    assert shared.of(_policies("c", namespace=namespace)) is plain
    assert own == AppliedPolicies.of(
        _policies("b", own={"messageTTLInSeconds": 5}, namespace=namespace)
    )
