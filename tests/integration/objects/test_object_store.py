"""ObjectStore against a real SeaweedFS: requests, errors that name what
went wrong, the start check, and an outage logged once."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from magnetar.broker.storage import metrics
from magnetar.broker.storage.objects.store import (
    ObjectCorrupt,
    ObjectExists,
    ObjectNotFound,
    ObjectStore,
    ObjectStoreConfig,
    ObjectStoreConfigError,
    ObjectStoreError,
)
from tests.support.seaweedfs import SECRET_KEY, SeaweedServer


def _store(server: SeaweedServer, url: str, **kw: object) -> ObjectStore:
    return ObjectStore(ObjectStoreConfig(url, endpoint=server.endpoint, region="us-east-1", **kw))  # type: ignore[arg-type]


def _sample(name: str, **labels: str) -> float:
    registry = CollectorRegistry()
    metrics.register(registry)
    value = registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


async def test_requests_round_trip(seaweedfs: SeaweedServer, object_store_url: str) -> None:
    store = _store(seaweedfs, object_store_url)
    puts = _sample("magnetar_object_store_requests_total", kind="put")
    written = _sample("magnetar_object_store_bytes_total", direction="written")
    data = bytes(range(256)) * 40

    await store.put("rounds/1", data)
    assert await store.get("rounds/1") == data
    assert await store.get_range("rounds/1", 1000, 300) == data[1000:1300]
    assert await store.get_ranges("rounds/1", [0, 5000], [10, 20]) == [data[:10], data[5000:5020]]
    assert await store.size("rounds/1") == len(data)
    assert await store.size("rounds/2") is None
    await store.put("rounds/3", b"x")
    listed = await store.list_objects("rounds/")
    assert sorted((o.key, o.size) for o in listed) == [("rounds/1", len(data)), ("rounds/3", 1)]

    await store.delete(["rounds/1", "rounds/3"])
    await store.delete(["rounds/1"])  # already gone: fine
    assert await store.list_objects("rounds/") == []
    assert _sample("magnetar_object_store_requests_total", kind="put") == puts + 2
    assert (
        _sample("magnetar_object_store_bytes_total", direction="written") == written + len(data) + 1
    )


async def test_create_only_put_never_replaces(
    seaweedfs: SeaweedServer, object_store_url: str
) -> None:
    store = _store(seaweedfs, object_store_url)
    await store.put("ledger/7", b"first")
    with pytest.raises(ObjectExists, match="ledger/7"):
        await store.put("ledger/7", b"second")
    assert await store.get("ledger/7") == b"first"
    await store.put("ledger/7", b"third", create=False)
    assert await store.get("ledger/7") == b"third"


async def test_missing_and_truncated_objects_are_errors_naming_the_key(
    seaweedfs: SeaweedServer, object_store_url: str
) -> None:
    store = _store(seaweedfs, object_store_url)
    with pytest.raises(ObjectNotFound, match="rounds/404"):
        await store.get_range("rounds/404", 0, 10)
    await store.put("rounds/short", b"0123456789")
    with pytest.raises(ObjectCorrupt, match=r"rounds/short.*asked for 20 bytes at 5, got 5"):
        await store.get_range("rounds/short", 5, 20)
    with pytest.raises(ObjectCorrupt, match="rounds/short"):
        await store.get_ranges("rounds/short", [0, 8], [4, 4])


async def test_start_check_says_what_is_wrong(
    seaweedfs: SeaweedServer, object_store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _store(seaweedfs, object_store_url).check()

    with pytest.raises(ObjectStoreConfigError, match="bucket 'no-such-bucket' does not exist"):
        await _store(seaweedfs, "s3://no-such-bucket/x").check()

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    with pytest.raises(ObjectStoreConfigError, match="refused these credentials") as refused:
        await _store(seaweedfs, object_store_url).check()
    assert "not-the-secret" not in str(refused.value)
    assert SECRET_KEY not in str(refused.value)

    with pytest.raises(ObjectStoreConfigError, match="cannot be reached"):
        await ObjectStore(
            ObjectStoreConfig(
                object_store_url,
                endpoint="http://127.0.0.1:1",
                region="us-east-1",
                max_retries=0,
                connect_timeout_s=0.5,
            )
        ).check()


def test_config_rejects_what_cannot_work() -> None:
    with pytest.raises(ObjectStoreConfigError, match="s3://bucket/prefix"):
        ObjectStoreConfig("gs://bucket/x")
    with pytest.raises(ObjectStoreConfigError, match="endpoint"):
        ObjectStoreConfig("s3://bucket/x", endpoint="127.0.0.1:9000")
    config = ObjectStoreConfig("s3://bucket/a/b/")
    assert (config.bucket, config.prefix) == ("bucket", "a/b")


async def test_an_outage_is_logged_once_and_its_end_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = SeaweedServer(tmp_path).start()
    try:
        for key, value in server.env().items():
            monkeypatch.setenv(key, value)
        await server.warm_up("s3://magnetar/outage")
        await _store(server, "s3://magnetar/outage").put("a", b"1")
        store = _store(
            server,
            "s3://magnetar/outage",
            request_timeout_s=1.0,
            connect_timeout_s=1.0,
            max_retries=0,
        )
        assert await store.get("a") == b"1"
        errors = _sample("magnetar_object_store_errors_total", kind="get")
        server.pause()
        with capture_logs() as logs:
            for _ in range(3):
                with pytest.raises(ObjectStoreError, match="object store get of a failed"):
                    await store.get("a")
            assert store.in_outage
            server.resume()
            assert await store.get("a") == b"1"
        events = [e["event"] for e in logs]
        assert events == [
            "object store request failed; callers retry",
            "object store reachable again",
        ]
        assert logs[1]["failed_requests"] == 3
        assert _sample("magnetar_object_store_errors_total", kind="get") == errors + 3
    finally:
        server.stop()
