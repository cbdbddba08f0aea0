"""The storage layer's errors (re-exported by api.py, where callers take them)."""

from __future__ import annotations


class StorageError(Exception):
    """Base of every storage error. ``retriable``: the caller may try again later."""

    retriable: bool = False


class ManagedLedgerClosed(StorageError):
    """The managed ledger (or its factory) is closed or deleted."""


class ManagedLedgerFenced(StorageError):
    """A write failed and could not be undone: the ledger refuses further writes.

    Reopening the managed ledger recovers it (the torn tail is cut on open).
    """


class CursorClosed(StorageError):
    """The cursor was closed or deleted."""


class CursorAlreadyExists(StorageError):
    """``open_cursor`` was asked for a name that a non-durable cursor holds."""


class ConcurrentReadError(StorageError):
    """A cursor already has a read in flight; one at a time per cursor."""

    retriable = True


class InvalidPosition(StorageError, ValueError):
    """A position beyond the end of the ledger (or otherwise impossible)."""


class MetadataError(StorageError):
    """Base of metadata store errors."""


class BadVersion(MetadataError):
    """Compare-and-set failed: the node's version is not the expected one."""


class NotFound(MetadataError):
    """The node does not exist."""


class NotEmpty(MetadataError):
    """``delete`` of a node that still has children."""


class MetadataStoreClosed(MetadataError):
    """The metadata store is closed."""
