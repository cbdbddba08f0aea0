"""A bounded set of open ledger files: thousands of ledgers, bounded fds.

A :class:`LedgerFile` opens its descriptor on demand; this keeps the most
recently used ones open, up to ``capacity``, and closes the least recently
used idle one past that. A file is in use (``refs`` > 0) from ``acquire``
to ``release`` around an I/O call on a worker thread and is never closed
while in use, so the limit is soft by the files in use at once. Every call
here runs on the event loop thread: descriptors are opened and closed there
only, so a worker thread never sees one closed under it.
"""

from __future__ import annotations

import errno
import resource
from collections import OrderedDict

import structlog

from magnetar.broker.storage.segment import LedgerFile

log = structlog.get_logger(__name__)

# What the LRU holds at least, whatever the descriptor limit.
MIN_OPEN_FILES = 128
# And at most, so that the descriptors a broker holds stay bounded however
# many topics it serves: past this many ledgers written in turn, files are
# reopened.
MAX_OPEN_FILES = 16384


def capacity_for_limit() -> int:
    """Half the process's descriptor limit, within [MIN_OPEN_FILES,
    MAX_OPEN_FILES]; the other half is left to sockets, the metadata store and
    index files. A ledger written every round keeps its descriptor: reopening
    one per round (an open and a close, about 5.5 us of CPU on this machine's
    ext4) was 7-9% of the broker's CPU per message unbatched over 1,000 topics
    when the LRU held 128 (issue 48)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MAX_OPEN_FILES
    return max(MIN_OPEN_FILES, min(MAX_OPEN_FILES, soft // 2))


class OpenFiles:
    """LRU of ledger files holding an open descriptor."""

    __slots__ = ("_capacity", "_lru")

    def __init__(self, capacity: int = MIN_OPEN_FILES) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self._capacity = capacity
        self._lru: OrderedDict[LedgerFile, None] = OrderedDict()

    @property
    def capacity(self) -> int:
        return self._capacity

    def __len__(self) -> int:
        return len(self._lru)

    def adopt(self, lf: LedgerFile) -> None:
        """A file just created or opened (its descriptor is open)."""
        self._lru[lf] = None
        self._lru.move_to_end(lf)
        self._evict()

    def acquire(self, lf: LedgerFile) -> None:
        """Open ``lf`` if needed and mark it in use; pair with :meth:`release`.
        Out of descriptors (the other half of the limit taken by sockets,
        say), the idle half of the LRU closes for good and the open is tried
        once more: a full table otherwise fails a whole journal round."""
        try:
            lf.open_fd()
        except OSError as exc:
            if exc.errno not in (errno.EMFILE, errno.ENFILE) or not self._shrink():
                raise
            lf.open_fd()
        lf.refs += 1
        lru = self._lru
        if lf in lru:
            lru.move_to_end(lf)
        else:
            lru[lf] = None
            self._evict()

    def release(self, lf: LedgerFile) -> None:
        lf.refs -= 1
        if len(self._lru) > self._capacity:
            self._evict()

    def close(self, lf: LedgerFile) -> None:
        """Close ``lf`` for good (trimmed, deleted, its ledger closed)."""
        self._lru.pop(lf, None)
        lf.close()

    def _shrink(self) -> bool:
        """Halve the capacity to what is open now and close idle files down
        to it. False when nothing could be closed."""
        before = len(self._lru)
        self._capacity = max(1, before // 2)
        self._evict()
        log.warning(
            "out of descriptors: fewer ledger files kept open",
            open_before=before,
            open_now=len(self._lru),
            capacity=self._capacity,
        )
        return len(self._lru) < before

    def _evict(self) -> None:
        lru = self._lru
        excess = len(lru) - self._capacity
        if excess <= 0:
            return
        # From the least recently used end, stopping at the last victim (a
        # copy of the whole LRU per eviction cost 13% of the broker's CPU per
        # message when every round reopened files, at 1,000 topics).
        victims: list[LedgerFile] = []
        for lf in lru:
            if lf.refs == 0:
                victims.append(lf)
                if len(victims) == excess:
                    break
        for lf in victims:
            del lru[lf]
            lf.release_fd()
