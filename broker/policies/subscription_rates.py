"""subscriptionDispatchRate: a dispatch quota for each subscription of a topic
on its own (dispatchRate is one quota all of a topic's subscriptions share).

The namespace and the topic set it as the DispatchRate JSON dispatchRate
takes. One subscription's own rate, set at `.../{topic}/{subName}/dispatchRate`,
is kept where Pulsar keeps it: in the topic's policies, under
`subscriptionPolicies` (subName -> {"dispatchRate": DispatchRate}); for that
subscription it wins over the topic's and the namespace's value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from magnetar.broker.policies.rates import DispatchRate

SUBSCRIPTION_DISPATCH_RATE_POLICY = "subscriptionDispatchRate"
# The topic-policy field of Pulsar's per-subscription policies, and the key of
# the dispatch rate in one subscription's entry.
SUBSCRIPTION_POLICIES = "subscriptionPolicies"
DISPATCH_RATE_KEY = "dispatchRate"


def subscription_overrides(stored: object) -> dict[str, DispatchRate]:
    """The per-subscription dispatch rates in a stored subscriptionPolicies
    map; entries that are not one (another policy, a bad value) are skipped."""
    # None first: a first isinstance against an ABC walks its registry.
    if stored is None or not isinstance(stored, Mapping):
        return {}
    found = {}
    for name, entry in stored.items():
        body = entry.get(DISPATCH_RATE_KEY) if isinstance(entry, Mapping) else None
        if isinstance(name, str) and body is not None:
            found[name] = DispatchRate.from_json(body)
    return found


@dataclass(frozen=True, slots=True)
class SubscriptionDispatchRates:
    """What each subscription of one topic is limited to."""

    # The topic's (else the namespace's) subscriptionDispatchRate.
    default: DispatchRate | None = None
    # Subscriptions with a rate of their own.
    overrides: Mapping[str, DispatchRate] = field(default_factory=dict)

    def of(self, subscription: str) -> DispatchRate | None:
        return self.overrides.get(subscription, self.default)
