"""Results are written atomically: a crash mid-write leaves the previous file whole."""

import json
import os

import pytest

from fedretain.files import atomic_write_text, write_json


def test_crash_during_replace_keeps_old_file_and_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "summary.json"
    write_json(path, {"final_accuracy": 0.5})

    def crash(src, dst):
        raise KeyboardInterrupt  # as if the process were stopped between write and rename

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        write_json(path, {"final_accuracy": 0.9})
    monkeypatch.undo()
    assert json.loads(path.read_text()) == {"final_accuracy": 0.5}
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]


def test_atomic_write_creates_folders_and_replaces(tmp_path):
    path = tmp_path / "a" / "b.txt"
    atomic_write_text(path, "one")
    atomic_write_text(path, "two")
    assert path.read_text() == "two"
