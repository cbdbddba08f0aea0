"""The compacted view's file (issue 16): written aside and swapped in, so an
interrupted write leaves the previous view; a damaged file is ignored."""

from __future__ import annotations

from pathlib import Path

from magnetar.broker.compaction.view import CompactedView, load, save
from magnetar.broker.storage.api import Entry, Position


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
