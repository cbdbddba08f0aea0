"""georep_run's per-cluster view of a history: the other cluster's receipts
cannot collide with this cluster's positions, and a message missing on one
cluster only is flagged on that cluster only."""

from __future__ import annotations

from tests.chaos.checker import Op, check
from tests.chaos.georep_run import recoveries, side_view


def history() -> list[Op]:
    """a0p0 sent to a, b0p0 to b; both receipts at (1, 0) of their cluster."""
    ops = [
        Op("send", 1.0, "a0p0", 0, "ok", 1, 0, consumer="a"),
        Op("send", 1.0, "b0p0", 0, "ok", 1, 0, consumer="b"),
    ]
    for cluster, order in (("a", ("a0p0", "b0p0")), ("b", ("b0p0", "a0p0"))):
        for entry, producer in enumerate(order):
            ops.append(Op("final", 3.0, producer, 0, "", 1, entry, consumer=cluster))
            ops.append(Op("receive", 2.0, producer, 0, "", 1, entry, consumer=cluster))
    return ops


def test_each_cluster_checks_clean() -> None:
    for cluster in ("a", "b"):
        report = check(side_view(history(), cluster))
        assert report.ok, report.anomalies
        assert (report.acknowledged, report.stored, report.received) == (2, 2, 2)


def test_a_message_missing_on_one_cluster_is_lost_there_only() -> None:
    ops = [op for op in history() if not (op.kind == "final" and op.key == ("a0p0", 0)
                                          and op.consumer == "b")]  # fmt: skip
    assert check(side_view(ops, "a")).ok
    assert check(side_view(ops, "b")).kinds() == {"lost": 1}


def test_a_message_stored_twice_on_one_cluster_is_a_duplicate_there() -> None:
    ops = [*history(), Op("final", 3.0, "a0p0", 0, "", 1, 2, consumer="b")]
    # Stored again after itself: out of order too.
    assert check(side_view(ops, "b")).kinds() == {"duplicate": 1, "order": 1}
    assert check(side_view(ops, "a")).ok


def test_recovery_counts_deliveries_on_the_other_cluster() -> None:
    # Healed at 1.5: each producer's message confirmed at 1.0, so none counts.
    assert recoveries(history(), [1.5]) == []
    assert recoveries(history(), [0.5]) == [1.5]
