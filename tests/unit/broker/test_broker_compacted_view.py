"""The compacted view's file (issue 16): written aside and swapped in, so an
interrupted write leaves the previous view; a damaged file is ignored; read
when first needed (issue 43)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import cast

import pytest

from magnetar.broker.compaction.state import CompactionStatus, TopicCompaction, view_path
from magnetar.broker.compaction.view import CompactedView, load, save
from magnetar.broker.storage.api import Entry, ManagedLedger, Position


def _view(tag: bytes) -> CompactedView:
    return CompactedView(
        Position(3, 9), [Entry(Position(3, 1), b"one" + tag), Entry(Position(3, 7), tag, 4)]
    )


def test_round_trip_and_reads(tmp_path: Path) -> None:
    path = tmp_path / "t.view"
    save(_view(b"x"), path)
    loaded = load(path)
    assert loaded is not None
    assert loaded.horizon == Position(3, 9)
    assert loaded.entries == _view(b"x").entries
    assert [e.position for e in loaded.read(Position(3, 2), 10)] == [Position(3, 7)]
    assert loaded.read(Position(3, 8), 10) == []
    assert loaded.messages == 5


def test_an_interrupted_write_leaves_the_previous_view(tmp_path: Path) -> None:
    path = tmp_path / "t.view"
    save(_view(b"old"), path)
    # What a crash before the rename leaves: a partial file beside the view.
    partial = _view(b"new").encode()
    path.with_name(path.name + ".tmp").write_bytes(partial[: len(partial) // 2])
    loaded = load(path)
    assert loaded is not None and loaded.entries == _view(b"old").entries
    assert not path.with_name(path.name + ".tmp").exists()


def test_a_damaged_file_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "t.view"
    save(_view(b"x"), path)
    data = bytearray(path.read_bytes())
    data[30] ^= 0xFF
    path.write_bytes(bytes(data))
    assert load(path) is None
    path.write_bytes(b"short")
    assert load(path) is None
    assert load(tmp_path / "missing.view") is None


def test_a_topics_view_and_state_are_read_on_first_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Loading a topic touches no compaction file (issue 43): the view and the
    last run's state are read when first asked for."""
    topic = "persistent://public/default/t"
    view = view_path(tmp_path, topic)
    save(_view(b"kept"), view)
    state = {"status": "RUNNING", "last_error": "", "pending_bytes": 7}
    view.with_suffix(".state").write_text(json.dumps(state))
    opened: list[Path] = []
    real_read_bytes, real_read_text = Path.read_bytes, Path.read_text

    def read_bytes(path: Path) -> bytes:
        opened.append(path)
        return real_read_bytes(path)

    def read_text(path: Path) -> str:
        opened.append(path)
        return real_read_text(path)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    monkeypatch.setattr(Path, "read_text", read_text)
    compaction = TopicCompaction(topic, cast(ManagedLedger, None), tmp_path)
    assert opened == []
    # A run cut by a restart reads back as failed.
    assert compaction.status is CompactionStatus.ERROR
    assert compaction.view is not None and compaction.view.horizon == Position(3, 9)
    assert len(opened) == 2
