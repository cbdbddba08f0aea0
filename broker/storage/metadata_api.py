"""The metadata store seam: a ZooKeeper-shaped tree of versioned values
(re-exported by api.py, where callers take it). Implementations:
``SqliteMetadataStore`` (metadata.py) and the cluster's etcd store."""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import NamedTuple


class Stat(NamedTuple):
    """A node's version: 0 when created, +1 on every put."""

    version: int
    created_ms: int
    modified_ms: int


class GetResult(NamedTuple):
    value: bytes
    stat: Stat


class NotificationType(enum.Enum):
    CREATED = "created"
    MODIFIED = "modified"
    DELETED = "deleted"
    CHILDREN_CHANGED = "children_changed"


class Notification(NamedTuple):
    type: NotificationType
    path: str


NotificationListener = Callable[[Notification], None]


def validate_path(path: str) -> None:
    """Refuse a path that is not absolute, has a trailing slash or an empty
    component: every metadata store implementation checks the same way."""
    if not path.startswith("/") or (len(path) > 1 and path.endswith("/")) or "//" in path:
        raise ValueError(f"invalid metadata path {path!r}")


class MetadataStore(ABC):
    """A ZooKeeper-shaped tree of versioned byte values.

    Paths are absolute, ``/``-separated, without a trailing slash. ``put`` creates
    missing parents (with empty values), as Pulsar's metadata store does.
    Listeners are called on the event loop for changes made through this store
    (the embedded store cannot see other processes' writes; a ZooKeeper store
    would deliver its watches the same way).

    Storage keeps its own records under ``/managed-ledgers/<quoted ledger
    name>[/<quoted cursor name>]`` and ``/storage/``; other paths are free.
    """

    @abstractmethod
    async def get(self, path: str) -> GetResult | None:
        """The node's value and stat, or None if it does not exist."""

    @abstractmethod
    async def put(self, path: str, value: bytes, expected_version: int | None = None) -> Stat:
        """Create or replace a node; returns its new stat.

        ``expected_version``: None = unconditional; -1 = the node must not exist;
        n >= 0 = the node's version must be n. Otherwise raises :class:`BadVersion`.
        """

    @abstractmethod
    async def delete(self, path: str, expected_version: int | None = None) -> None:
        """Delete a node. Raises NotFound, BadVersion, or NotEmpty (has children)."""

    @abstractmethod
    async def delete_recursive(self, path: str) -> None:
        """Delete a node and everything under it; no error if it does not exist."""

    @abstractmethod
    async def get_children(self, path: str) -> list[str]:
        """Sorted names (last path component) of the node's direct children."""

    @abstractmethod
    async def exists(self, path: str) -> bool: ...

    @abstractmethod
    def register_listener(self, listener: NotificationListener) -> Callable[[], None]:
        """Call ``listener`` on every change; returns a function that unregisters."""

    @property
    def sees_every_change(self) -> bool:
        """True when listeners hear of every change to the store, whoever made
        it (one process owns it), so readers may cache what they read."""
        return False

    @abstractmethod
    async def close(self) -> None:
        """Idempotent. Pending and later calls raise :class:`MetadataStoreClosed`."""
