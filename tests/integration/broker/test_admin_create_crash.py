"""A topic the admin API created survives a crash (contract point 4): the
204 of `PUT .../{topic}` comes once the new ledger's record is stored, not
while it waits to share a commit with other new ledgers (storage/births.py)."""

from __future__ import annotations

from pathlib import Path

from tests.support.brokers import BrokerProcess
from tests.support.http_calls import http_call


def test_admin_created_topics_survive_sigkill(tmp_path: Path) -> None:
    """Ten topics created over REST, SIGKILL at once after the last 204, a
    restart: the namespace lists all ten."""
    broker = BrokerProcess(tmp_path / "data", tmp_path / "broker.log")
    broker.start()
    try:
        base = f"{broker.http_url}/admin/v2/persistent/public/default"
        names = [f"made-{i}" for i in range(10)]
        for name in names:
            assert http_call("PUT", f"{base}/{name}") == (204, None)
        broker.kill()
        broker.start()
        listed = http_call("GET", base)[1]
        assert {f"persistent://public/default/{n}" for n in names} <= set(listed)
    finally:
        broker.stop()
