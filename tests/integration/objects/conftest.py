"""Fixtures: a real SeaweedFS (S3 API) for the session, a fresh prefix per
test, and brokers whose ledgers go to it."""

from typing import Any

import pytest

from tests.support.broker_fixtures import broker, broker_factory
from tests.support.seaweedfs import (
    SeaweedServer,
    object_store_url,  # noqa: F401  (a fixture: s3://bucket/prefix with credentials set)
    seaweedfs,  # noqa: F401  (a fixture: the session's SeaweedFS)
)

__all__ = ["broker", "broker_factory"]


@pytest.fixture
def broker_defaults(seaweedfs: SeaweedServer, object_store_url: str) -> dict[str, Any]:  # noqa: F811
    """Every broker of these tests keeps its ledgers in the test's bucket prefix."""
    return {
        "storage": "object",
        "object_store_url": object_store_url,
        "object_store_endpoint": seaweedfs.endpoint,
    }
