"""TopicCompaction: one topic's compacted view, its file, and the status of
the latest run (what the admin API reports).

The status, its error and the bytes published toward the threshold policy
live in a small state file beside the view, so a restart neither forgets
the last run nor starts the threshold count again: written at every status
change, on close, and whenever the count has grown by a sixteenth of the
threshold since it was last written (a crash loses at most that much). A run
that a crash interrupted reads back as ERROR.
"""

from __future__ import annotations

import asyncio
import enum
import hashlib
import json
import os
import time
from pathlib import Path

import structlog

from magnetar.broker.compaction.compactor import compact
from magnetar.broker.compaction.view import CompactedView, load, remove, save
from magnetar.broker.errors import BrokerServiceError
from magnetar.broker.storage.api import ManagedLedger
from magnetar.proto.errors import ServerError

log = structlog.get_logger(__name__)


class CompactionStatus(enum.Enum):
    NOT_RUN = "NOT_RUN"
    RUNNING = "RUNNING"
    SUCCESS = "SUCCESS"
    ERROR = "ERROR"


class CompactionRunning(BrokerServiceError):
    def __init__(self, topic: str) -> None:
        super().__init__(ServerError.NotAllowedError, f"compaction of {topic} is already running")


def view_path(directory: Path, topic: str) -> Path:
    # Topic names may be long and hold any character: a bounded, safe name.
    digest = hashlib.sha256(topic.encode()).hexdigest()[:32]
    return directory / f"{digest}.view"


def _state_path(view: Path) -> Path:
    return view.with_suffix(".state")


def remove_compaction_files(view: Path) -> None:
    """The topic is deleted: its view and its state go."""
    remove(view)
    state = _state_path(view)
    for candidate in (state, state.with_name(state.name + ".tmp")):
        candidate.unlink(missing_ok=True)


class TopicCompaction:
    def __init__(self, topic: str, ledger: ManagedLedger, directory: Path | None) -> None:
        self.topic = topic
        self._ledger = ledger
        self._directory = directory
        # The view and the state file are read on first use, not when the
        # topic loads: most topics are never compacted, and three file
        # probes on the event loop per topic slowed topic creation (issue 43).
        self._loaded = False
        self._view: CompactedView | None = None
        self._status = CompactionStatus.NOT_RUN
        self._last_error = ""
        self._task: asyncio.Task[None] | None = None
        # The automatic trigger: bytes published since the last run started.
        self.threshold_bytes = 0
        self._pending_bytes = 0
        self._persisted_pending = 0

    @property
    def _path(self) -> Path | None:
        directory = self._directory
        return None if directory is None else view_path(directory, self.topic)

    @property
    def view(self) -> CompactedView | None:
        self._load()
        return self._view

    @view.setter
    def view(self, view: CompactedView | None) -> None:
        self._load()
        self._view = view

    @property
    def status(self) -> CompactionStatus:
        self._load()
        return self._status

    @status.setter
    def status(self, status: CompactionStatus) -> None:
        self._load()
        self._status = status

    @property
    def last_error(self) -> str:
        self._load()
        return self._last_error

    @last_error.setter
    def last_error(self, error: str) -> None:
        self._load()
        self._last_error = error

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        path = self._path
        if path is None:
            return
        self._view = load(path)
        try:
            state = json.loads(_state_path(path).read_text())
            status = CompactionStatus(state["status"])
            error = str(state["last_error"])
            pending = int(state["pending_bytes"])
        except FileNotFoundError:
            return
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("compaction state ignored", topic=self.topic, reason=str(exc))
            return
        if status is CompactionStatus.RUNNING:
            status, error = CompactionStatus.ERROR, "interrupted by a broker restart"
        self._status, self._last_error = status, error
        self._pending_bytes = self._persisted_pending = max(pending, 0)

    def _save_state(self) -> None:
        """Write the state aside and swap it in (a few bytes, on the loop)."""
        view = self._path
        if view is None:
            return
        state = {
            "status": self.status.value,
            "last_error": self.last_error,
            "pending_bytes": self._pending_bytes,
        }
        path = _state_path(view)
        tmp = path.with_name(path.name + ".tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(state))
            os.replace(tmp, path)
        except OSError as exc:
            log.warning("compaction state not saved", topic=self.topic, reason=str(exc))
            return
        self._persisted_pending = self._pending_bytes

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def note_published(self, size: int) -> None:
        """An entry was stored; start a run once the threshold policy is passed."""
        self._load()
        self._pending_bytes += size
        if 0 < self.threshold_bytes <= self._pending_bytes and not self.running:
            log.info("compaction threshold reached", topic=self.topic, bytes=self._pending_bytes)
            self.trigger()
        elif self._pending_bytes - self._persisted_pending >= self.threshold_bytes // 16:
            self._save_state()

    def trigger(self) -> asyncio.Task[None]:
        """Start a run; CompactionRunning while one is under way."""
        if self.running:
            raise CompactionRunning(self.topic)
        self._load()
        self._pending_bytes = 0
        self.status = CompactionStatus.RUNNING
        self._save_state()
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self._task

    async def _run(self) -> None:
        started = time.monotonic()
        try:
            view = await compact(self._ledger, self.view)
            path = self._path
            if path is not None:
                await asyncio.to_thread(save, view, path)
        except asyncio.CancelledError:
            self.status = CompactionStatus.ERROR
            self.last_error = "cancelled (topic closed)"
            self._save_state()
            raise
        except Exception as exc:
            self.status = CompactionStatus.ERROR
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.warning("compaction failed", topic=self.topic, error=self.last_error)
            self._save_state()
            return
        self.view = view
        self.status = CompactionStatus.SUCCESS
        self.last_error = ""
        self._save_state()
        log.info(
            "topic compacted",
            topic=self.topic,
            horizon=str(view.horizon),
            entries=len(view),
            seconds=round(time.monotonic() - started, 3),
        )

    async def close(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._pending_bytes != self._persisted_pending:
            self._save_state()

    def delete(self) -> None:
        """The topic is deleted: its view and state go too."""
        self._loaded, self._view = True, None
        path = self._path
        if path is not None:
            remove_compaction_files(path)
