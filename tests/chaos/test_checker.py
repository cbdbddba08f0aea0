"""The checker on hand-made histories: a clean one passes, and each anomaly
it names is flagged when the history contains it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.checker import Op, check, load


def send(producer: str, seq: int, ledger: int, entry: int, result: str = "ok") -> Op:
    return Op("send", 0.0, producer, seq, result, ledger, entry)


def stored(producer: str, seq: int, ledger: int, entry: int) -> Op:
    return Op("final", 0.0, producer, seq, "", ledger, entry)


def received(producer: str, seq: int, ledger: int, entry: int) -> Op:
    return Op("receive", 0.0, producer, seq, "", ledger, entry, consumer="c")


def clean() -> list[Op]:
    """Two producers; p1's ledger 1 sealed at 2 entries by a new owner."""
    ops = [
        send("p1", 0, 1, 0),
        send("p1", 1, 1, 1),
        send("p2", 0, 2, 0),
        send("p1", 2, 2, 1),
        send("p2", 1, 0, 0, result="fail"),  # an error answer: not acknowledged
    ]
    ops += [stored("p1", 0, 1, 0), stored("p1", 1, 1, 1)]
    ops += [stored("p2", 0, 2, 0), stored("p1", 2, 2, 1)]
    ops += [received("p1", 0, 1, 0), received("p1", 1, 1, 1)]
    ops += [received("p2", 0, 2, 0), received("p1", 2, 2, 1)]
    ops += [Op("heal", 10.0), Op("caught_up", 12.5)]
    return ops


def test_a_clean_history_passes() -> None:
    report = check(clean(), fences={1: 2})
    assert report.ok, report.anomalies
    assert (report.sends, report.acknowledged, report.stored) == (5, 4, 4)
    assert report.recovery_seconds == pytest.approx(2.5)


def test_a_redelivery_at_the_same_position_is_counted_not_flagged() -> None:
    report = check([*clean(), received("p1", 0, 1, 0)], fences={1: 2})
    assert report.ok, report.anomalies
    assert report.redelivered == 1


def test_a_resend_confirmed_as_duplicate_has_no_position() -> None:
    """Deduplication answers a resend of a stored message with -1:-1."""
    report = check([*clean(), send("p1", 1, -1, -1), send("p2", 0, -1, -1)], fences={1: 2})
    assert report.ok, report.anomalies
    assert "lost" in set(check([*clean(), send("p7", 0, -1, -1)]).kinds())


def _flags(ops: list[Op], fences: dict[int, int] | None = None) -> set[str]:
    return set(check(ops, fences={1: 2} if fences is None else fences).kinds())


def test_lost_acknowledged_send() -> None:
    ops = [op for op in clean() if not (op.kind == "final" and op.key == ("p2", 0))]
    assert "lost" in _flags(ops)


def test_duplicate_in_storage() -> None:
    assert "duplicate" in _flags([*clean(), stored("p1", 0, 3, 0)])


def test_duplicate_delivery_at_another_position() -> None:
    assert "duplicate" in _flags([*clean(), received("p1", 0, 3, 7)])


def test_order_per_producer() -> None:
    ops = clean()
    finals = [op for op in ops if op.kind == "final"]
    rest = [op for op in ops if op.kind != "final"]
    finals[0], finals[1] = finals[1], finals[0]
    assert "order" in _flags(rest + finals)


def test_phantom_read() -> None:
    assert "phantom" in _flags([*clean(), received("p9", 0, 2, 5)])
    assert "phantom" in _flags([*clean(), stored("p9", 0, 2, 5)])


def test_one_position_confirmed_to_two_owners() -> None:
    """The old owner and the new one both confirmed entry (2, 0)."""
    assert "two-owners" in _flags([*clean(), send("p3", 0, 2, 0)])


def test_receipt_for_a_position_holding_another_message() -> None:
    ops = [*clean(), send("p3", 0, 2, 1), stored("p3", 0, 2, 9), received("p3", 0, 2, 9)]
    assert "two-owners" in _flags(ops)


def test_receipt_beyond_the_fence() -> None:
    """Ledger 1 was sealed at 2 entries; the paused owner confirmed entry 2."""
    ops = [*clean(), send("p3", 0, 1, 2), stored("p3", 0, 2, 5), received("p3", 0, 2, 5)]
    assert "beyond-fence" in _flags(ops)


def test_fences_come_from_the_history() -> None:
    """The workload records each sealed ledger as a fence op after healing;
    the checker reads the fences from there unless it is given them."""
    ops = [*clean(), send("p3", 0, 1, 2), stored("p3", 0, 2, 5), received("p3", 0, 2, 5)]
    fence = Op("fence", 30.0, "persistent://t", -1, "", 1, 2)
    assert "beyond-fence" in set(check([*ops, fence]).kinds())
    assert "beyond-fence" not in set(check(ops).kinds())


def test_history_lines_load_back(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    path.write_text("".join(op.line() for op in clean()))
    assert load(path) == clean()


def test_acknowledged_but_never_delivered() -> None:
    ops = [op for op in clean() if not (op.kind == "receive" and op.key == ("p1", 2))]
    assert "undelivered" in _flags(ops)


def test_consumers_never_catching_up_or_too_slowly() -> None:
    ops = [op for op in clean() if op.kind != "caught_up"]
    assert "slow-recovery" in _flags(ops)
    assert "slow-recovery" in set(check([*ops, Op("caught_up", 99.0)], recovery_bound=30.0).kinds())


def test_a_topic_nobody_serves_after_healing() -> None:
    assert "unreadable" in _flags([*clean(), Op("unreadable", 20.0, "persistent://t")])


def test_a_workload_that_had_to_be_killed() -> None:
    assert "unfinished" in _flags([*clean(), Op("unfinished", 400.0)])
