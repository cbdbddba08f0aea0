"""ObjectStore: the one door between the broker and an S3-compatible bucket.

A thin, typed layer over obstore (the Rust ``object_store`` crate's Python
bindings; README "Object storage" has the measurement that chose it): put,
ranged get, head, list, delete, each counted in Prometheus by kind, timed,
and mapped to the storage layer's errors. Requests run on obstore's own
threads, so the event loop only awaits them.

Credentials are never passed through here: obstore reads them the standard
way (``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``,
web identity, instance metadata), and no message of ours repeats a request's
headers. An outage is logged once when it starts and once when it ends, not
per request: the callers (the round writer, readers) retry on their own.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import obstore
import structlog
from obstore.exceptions import (
    AlreadyExistsError,
    BaseError,
    PermissionDeniedError,
    UnauthenticatedError,
)
from obstore.store import S3Store

from magnetar.broker.storage import metrics
from magnetar.broker.storage.errors import StorageError

if TYPE_CHECKING:
    from obstore.store import ClientConfig, RetryConfig

log = structlog.get_logger(__name__)

# Keys the broker writes for its own checks, never data.
PROBE_PREFIX = "_magnetar/probe-"


class ObjectStoreError(StorageError):
    """A request to the object store failed (after obstore's own retries)."""

    retriable = True


class ObjectNotFound(ObjectStoreError):
    """The key does not exist: data the index names is gone, or never was."""

    retriable = False


class ObjectExists(ObjectStoreError):
    """A create-only put found the key taken: another writer got there first."""

    retriable = False


class ObjectCorrupt(ObjectStoreError):
    """An object is shorter than its index says, or fails its checksum."""

    retriable = False


class ObjectStoreConfigError(StorageError):
    """The bucket cannot be used as configured (missing, refused, malformed
    URL): the broker does not start."""


@dataclass(frozen=True, slots=True)
class ObjectStoreConfig:
    """Where the objects go. ``url`` is ``s3://bucket[/prefix]``; ``endpoint``
    is set for anything that is not AWS itself (MinIO, SeaweedFS, Ceph RGW,
    GCS's S3 interoperability): ``http://`` endpoints are allowed as given."""

    url: str
    endpoint: str | None = None
    region: str | None = None
    # One request's limits; callers above retry a failed request again later.
    request_timeout_s: float = 30.0
    connect_timeout_s: float = 5.0
    max_retries: int = 3
    retry_timeout_s: float = 10.0
    bucket: str = field(init=False)
    prefix: str = field(init=False)

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme != "s3" or not parts.netloc:
            raise ObjectStoreConfigError(
                f"object_store_url must look like s3://bucket/prefix, got {self.url!r}"
            )
        object.__setattr__(self, "bucket", parts.netloc)
        object.__setattr__(self, "prefix", parts.path.strip("/"))
        if self.endpoint is not None and urlsplit(self.endpoint).scheme not in ("http", "https"):
            raise ObjectStoreConfigError(
                f"object_store_endpoint must be an http(s) URL, got {self.endpoint!r}"
            )
        for name in ("request_timeout_s", "connect_timeout_s", "retry_timeout_s"):
            if not getattr(self, name) > 0:
                raise ObjectStoreConfigError(f"{name} must be positive")
        if self.max_retries < 0:
            raise ObjectStoreConfigError("max_retries must be >= 0")

    @property
    def where(self) -> str:
        """The bucket and endpoint, for messages (no credentials in either)."""
        at = self.endpoint or "AWS"
        return f"s3://{self.bucket}/{self.prefix} at {at}"


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    key: str
    size: int
    # When it was written (epoch seconds, the store's clock).
    modified: float = 0.0


def _first_line(exc: BaseException) -> str:
    # obstore's messages carry a multi-line debug dump after the first line.
    text = str(exc).strip().splitlines()
    return text[0][:400] if text else type(exc).__name__


class ObjectStore:
    """Requests to one bucket (and prefix). Safe to share by every ledger of a
    broker: obstore pools connections and is thread-safe."""

    def __init__(self, config: ObjectStoreConfig) -> None:
        self.config = config
        client: ClientConfig = {
            "timeout": f"{config.request_timeout_s}s",
            "connect_timeout": f"{config.connect_timeout_s}s",
        }
        if config.endpoint is not None and config.endpoint.startswith("http://"):
            client["allow_http"] = True
        retry: RetryConfig = {
            "max_retries": config.max_retries,
            "retry_timeout": timedelta(seconds=config.retry_timeout_s),
        }
        kwargs: dict[str, Any] = {}
        if config.endpoint is not None:
            kwargs["endpoint"] = config.endpoint
        if config.region is not None:
            kwargs["region"] = config.region
        self._store = S3Store(
            config.bucket,
            prefix=config.prefix or None,
            client_options=client,
            retry_config=retry,
            **kwargs,
        )
        # Set while requests fail: an outage is logged when it starts and ends.
        self._outage_since: float | None = None
        self.failures = 0

    # ---------------------------------------------------------------- requests

    async def put(self, key: str, data: bytes | memoryview, *, create: bool = True) -> None:
        """Store ``data`` under ``key``. ``create``: fail with ObjectExists
        rather than replace an object (S3 conditional put), so that no writer
        ever overwrites data another one committed."""
        started = time.monotonic()
        try:
            await obstore.put_async(self._store, key, data, mode="create" if create else None)
        except AlreadyExistsError as exc:
            self._done("put", started, 0)
            raise ObjectExists(f"object {key} already exists in {self.config.where}") from exc
        except (BaseError, OSError) as exc:
            raise self._failed("put", key, exc) from exc
        self._done("put", started, 0, len(data))

    async def get(self, key: str) -> bytes:
        """The whole object."""
        started = time.monotonic()
        try:
            result = await obstore.get_async(self._store, key)
            data = bytes(await result.bytes_async())
        except (BaseError, OSError) as exc:
            raise self._failed("get", key, exc) from exc
        self._done("get", started, len(data))
        return data

    async def get_range(self, key: str, start: int, length: int) -> bytes:
        """``length`` bytes from ``start``; a shorter object is ObjectCorrupt
        (the index promised those bytes)."""
        started = time.monotonic()
        try:
            data = bytes(
                await obstore.get_range_async(self._store, key, start=start, length=length)
            )
        except (BaseError, OSError) as exc:
            raise self._failed("get", key, exc) from exc
        self._done("get", started, len(data))
        if len(data) != length:
            raise ObjectCorrupt(
                f"object {key}: asked for {length} bytes at {start}, got {len(data)} "
                f"(truncated object in {self.config.where})"
            )
        return data

    async def get_ranges(
        self, key: str, starts: Sequence[int], lengths: Sequence[int]
    ) -> list[bytes]:
        """Several ranges of one object (obstore coalesces nearby ones)."""
        if not starts:
            return []
        started = time.monotonic()
        try:
            chunks = await obstore.get_ranges_async(
                self._store, key, starts=list(starts), lengths=list(lengths)
            )
        except (BaseError, OSError) as exc:
            raise self._failed("get", key, exc) from exc
        out = [bytes(c) for c in chunks]
        self._done("get", started, sum(map(len, out)))
        for data, start, length in zip(out, starts, lengths, strict=True):
            if len(data) != length:
                raise ObjectCorrupt(
                    f"object {key}: asked for {length} bytes at {start}, got {len(data)} "
                    f"(truncated object in {self.config.where})"
                )
        return out

    async def size(self, key: str) -> int | None:
        """The object's size, None when it does not exist."""
        started = time.monotonic()
        try:
            meta = await obstore.head_async(self._store, key)
        except FileNotFoundError:
            self._done("head", started, 0)
            return None
        except (BaseError, OSError) as exc:
            raise self._failed("head", key, exc) from exc
        self._done("head", started, 0)
        return int(meta["size"])

    async def list_objects(self, prefix: str = "") -> list[ObjectInfo]:
        """Every object under ``prefix`` (relative to the configured prefix)."""
        started = time.monotonic()
        try:
            pages = obstore.list(self._store, prefix=prefix or None)
            found = [
                ObjectInfo(m["path"], int(m["size"]), m["last_modified"].timestamp())
                async for page in pages
                for m in page
            ]
        except (BaseError, OSError) as exc:
            raise self._failed("list", prefix, exc) from exc
        self._done("list", started, 0)
        return found

    async def delete(self, keys: Sequence[str]) -> None:
        """Delete ``keys``; a key that is already gone is not an error."""
        if not keys:
            return
        started = time.monotonic()
        try:
            await obstore.delete_async(self._store, list(keys))
        except FileNotFoundError:
            pass
        except (BaseError, OSError) as exc:
            raise self._failed("delete", keys[0], exc) from exc
        self._done("delete", started, 0)

    async def check(self) -> None:
        """At start: the bucket exists and these credentials may list, write
        and delete in it. Raises ObjectStoreConfigError with one clear line."""
        where = self.config.where
        probe = f"{PROBE_PREFIX}{uuid.uuid4().hex}"
        try:
            await self.list_objects(PROBE_PREFIX)
            await self.put(probe, b"probe")
            await self.delete([probe])
        except ObjectStoreError as exc:
            cause = exc.__cause__
            text = str(cause) if cause is not None else str(exc)
            if "NoSuchBucket" in text:
                why = f"bucket {self.config.bucket!r} does not exist ({where})"
            elif isinstance(cause, PermissionDeniedError | UnauthenticatedError) or any(
                code in text
                for code in ("403", "InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied")
            ):
                why = f"the object store refused these credentials ({where})"
            else:
                why = f"the object store cannot be reached ({where}): {_first_line(exc)}"
            raise ObjectStoreConfigError(why) from None

    # --------------------------------------------------------------- accounting

    def _done(self, kind: str, started: float, nread: int, nwritten: int = 0) -> None:
        metrics.OBJECT_REQUESTS.labels(kind).inc()
        metrics.OBJECT_SECONDS.labels(kind).observe(time.monotonic() - started)
        if nread:
            metrics.OBJECT_BYTES.labels("read").inc(nread)
        if nwritten:
            metrics.OBJECT_BYTES.labels("written").inc(nwritten)
        if self._outage_since is not None:
            log.warning(
                "object store reachable again",
                store=self.config.where,
                outage_s=round(time.monotonic() - self._outage_since, 3),
                failed_requests=self.failures,
            )
            self._outage_since = None
            self.failures = 0

    def _failed(self, kind: str, key: str, exc: BaseException) -> ObjectStoreError:
        metrics.OBJECT_REQUESTS.labels(kind).inc()
        if isinstance(exc, FileNotFoundError):  # an answer, not an outage
            return ObjectNotFound(f"object {key} not found in {self.config.where}")
        metrics.OBJECT_ERRORS.labels(kind).inc()
        self.failures += 1
        if self._outage_since is None:
            self._outage_since = time.monotonic()
            log.warning(
                "object store request failed; callers retry",
                store=self.config.where,
                kind=kind,
                key=key,
                error=_first_line(exc),
            )
        return ObjectStoreError(f"object store {kind} of {key} failed: {_first_line(exc)}")

    @property
    def in_outage(self) -> bool:
        return self._outage_since is not None
