"""The pulsar-flex runner's pieces that need no Node.js: the `docker`
stand-in's mapping (issue 44: Pulsar's tools map to our CLI and nothing
else does) and the reading of mocha's xunit report."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.conformance.docker_standin import CONTAINER, mapped
from tests.conformance.js import outcomes

CLI = [sys.executable, "-m", "magnetar.client.cli"]


def test_pulsar_tools_map_to_our_cli() -> None:
    admin = ["exec", CONTAINER, "/pulsar/bin/pulsar-admin", "topics", "delete", "t", "-f"]
    assert mapped(admin) == [*CLI, "admin", "topics", "delete", "t", "-f"]
    client = ["exec", CONTAINER, "/pulsar/bin/pulsar-client", "consume", "t", "-n", "1"]
    assert mapped(client) == [*CLI, "consume", "t", "-n", "1"]


def test_anything_else_is_refused_with_a_reason() -> None:
    refusals = {
        "ps": ["ps"],
        "No such container": ["exec", "other", "/pulsar/bin/pulsar-admin", "topics", "list"],
        "maps only": ["exec", CONTAINER, "/pulsar/bin/pulsar", "standalone"],
        "produce, consume": ["exec", CONTAINER, "/pulsar/bin/pulsar-client", "read", "t"],
    }
    for reason, argv in refusals.items():
        answer = mapped(argv)
        assert isinstance(answer, str) and reason in answer, (argv, answer)


def test_xunit_report_outcomes(tmp_path: Path) -> None:
    report = tmp_path / "mocha-broker.xml"
    report.write_text(
        '<testsuite name="Mocha Tests" tests="3">'
        '<testcase classname="Client tests" name="connects" time="0.5"/>'
        '<testcase classname="Consumer tests" name="acks" time="60">'
        '<failure message="Timeout of 60000ms exceeded.">stack</failure></testcase>'
        '<testcase classname="Producer tests" name="later" time="0"><skipped/></testcase>'
        "</testsuite>"
    )
    found = [(o.name, o.status, o.detail) for o in outcomes(report)]
    assert found == [
        ("Client tests :: connects", "PASS", ""),
        ("Consumer tests :: acks", "FAIL", "Timeout of 60000ms exceeded."),
        ("Producer tests :: later", "SKIP", ""),
    ]
    missing = outcomes(tmp_path / "none.xml")
    assert [o.status for o in missing] == ["FAIL"]
