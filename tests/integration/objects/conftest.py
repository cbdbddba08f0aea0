"""Fixtures: a real SeaweedFS (S3 API) for the session, a fresh prefix per test."""

from tests.support.seaweedfs import (
    object_store_url,  # noqa: F401  (a fixture: s3://bucket/prefix with credentials set)
    seaweedfs,  # noqa: F401  (a fixture: the session's SeaweedFS)
)
