"""Fixtures: a real broker per test, on port 0, in a background thread."""

from __future__ import annotations

from tests.support.broker_fixtures import broker, broker_defaults, broker_factory
from tests.support.georep import linked_pair

__all__ = ["broker", "broker_defaults", "broker_factory", "linked_pair"]
