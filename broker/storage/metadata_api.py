"""The metadata store seam: a ZooKeeper-shaped tree of versioned values
(re-exported by api.py, where callers take it). Implementations:
``SqliteMetadataStore`` (metadata.py) and the cluster's etcd store."""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
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


class Put(NamedTuple):
    """In :meth:`MetadataStore.commit`: create or replace, as ``put``."""

    path: str
    value: bytes
    expected_version: int | None = None


class Delete(NamedTuple):
    """In :meth:`MetadataStore.commit`: delete a node without children, as ``delete``."""

    path: str
    expected_version: int | None = None


class Check(NamedTuple):
    """In :meth:`MetadataStore.commit`: a condition only, the node's version
    is ``version`` (-1: the node is absent). A writer's fence goes here."""

    path: str
    version: int


CommitOp = Put | Delete | Check
# etcd refuses transactions of more than 128 operations by default; parents
# and conditions need room beside the caller's own.
MAX_COMMIT_OPS = 100


def validate_commit(ops: Sequence[CommitOp]) -> None:
    """The checks every store makes before a commit."""
    if len(ops) > MAX_COMMIT_OPS:
        raise ValueError(f"a commit takes at most {MAX_COMMIT_OPS} operations, got {len(ops)}")
    seen: set[str] = set()
    for op in ops:
        validate_path(op.path)
        if op.path == "/":
            raise ValueError("cannot change the root node")
        if op.path in seen:
            raise ValueError(f"{op.path} appears twice in one commit")
        seen.add(op.path)


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
    async def commit(self, ops: Sequence[CommitOp]) -> list[Stat | None]:
        """All of ``ops`` or none of them, atomically: every Check and every
        expected version holds, then every Put and Delete applies. Returns a
        Stat per Put (None for the others). Raises BadVersion (nothing
        changed) when a condition fails, NotFound / NotEmpty as ``delete``
        does, ValueError for more than MAX_COMMIT_OPS ops or a path twice."""

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
