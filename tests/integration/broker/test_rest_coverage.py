"""The REST coverage report (issue 43) in `make test`: Pulsar's checked-in
admin v2 list against the route table of a standalone broker started here."""

from __future__ import annotations

from tests.conformance.rest_coverage import (
    FLOOR,
    TARGET_TAGS,
    broker_routes,
    pulsar_endpoints,
    reason_for,
    report,
)


def test_every_path_not_served_has_a_reason_and_coverage_holds() -> None:
    """Each path of the target tags is served or has its reason; the share
    served does not fall below the floor."""
    endpoints = pulsar_endpoints()
    assert len(endpoints) > 450 and {e.tag for e in endpoints} >= set(TARGET_TAGS)
    result = report(endpoints, broker_routes())
    unexplained = [f"{e.method} {e.path}" for e in result.unexplained()]
    assert not unexplained, unexplained
    assert result.target_ratio() >= FLOOR


def test_a_served_path_counts_and_a_missing_one_does_not() -> None:
    """The matching itself: {domain} stands for both topic domains and
    placeholder names do not matter."""
    endpoints = [e for e in pulsar_endpoints() if e.path.endswith("/{topic}/messageTTL")]
    routes = [("GET", "/admin/v2/{domain}/{t}/{n}/{x}/messageTTL")]
    result = report(endpoints, routes)
    served = {(e.method, e.path.split("/")[1]) for t in result.served.values() for e in t}
    assert served == {("GET", "persistent"), ("GET", "non-persistent")}
    missing = [e for t in result.missing.values() for e in t]
    assert {e.method for e in missing} == {"POST", "DELETE"}
    assert all(reason_for(e) is None for e in missing)
