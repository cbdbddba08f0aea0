"""Fixtures: a real broker per test, on port 0, in a background thread.

Conftests that want them import them by name (the broker suite's, Spark's).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.brokers import BrokerFactory, BrokerThread, broker_config


@pytest.fixture
def broker_defaults() -> dict[str, Any]:
    """Settings every broker of the test starts with (a conftest may override:
    the object storage suite puts every broker's ledgers in a bucket)."""
    return {}


@pytest.fixture
def broker_factory(tmp_path: Path, broker_defaults: dict[str, Any]) -> Iterator[BrokerFactory]:
    """Start brokers with config changes; every one is stopped after the test."""
    started: list[BrokerThread] = []

    def make(**changes: Any) -> BrokerThread:
        changes = {**broker_defaults, **changes}
        data_dir = changes.pop("data_dir", tmp_path / f"data-{len(started)}")
        broker = BrokerThread(broker_config(data_dir, **changes)).start()
        started.append(broker)
        return broker

    yield make
    for broker in started:
        broker.stop()


@pytest.fixture
def broker(broker_factory: BrokerFactory) -> BrokerThread:
    """A broker with the default configuration; `broker.restart()` keeps its data."""
    return broker_factory()
