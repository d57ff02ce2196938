"""Results are written atomically (a crash mid-write leaves the previous file whole), with the
umask's mode, as strict JSON; a failed write is one clear error."""

import errno
import json
import math
import os

import pytest

from fedretain.errors import OutputError
from fedretain.files import atomic_write_text, read_json, read_jsonl, write_json, write_jsonl


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


@pytest.mark.parametrize("env, synced", [(None, 1), ("1", 1), ("0", 0)])
def test_files_are_flushed_to_the_disk_unless_fedretain_fsync_is_0(
    tmp_path, monkeypatch, env, synced
):
    calls = []
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append(fd))
    if env is None:
        monkeypatch.delenv("FEDRETAIN_FSYNC", raising=False)
    else:
        monkeypatch.setenv("FEDRETAIN_FSYNC", env)
    atomic_write_text(tmp_path / "a.txt", "one")
    assert len(calls) == synced and (tmp_path / "a.txt").read_text() == "one"


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600)])
def test_files_get_the_mode_the_umask_implies(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        write_json(tmp_path / "summary.json", {"a": 1})
        atomic_write_text(tmp_path / "sub" / "metrics.jsonl", "{}\n")
    finally:
        os.umask(old)
    assert (tmp_path / "summary.json").stat().st_mode & 0o777 == mode
    assert (tmp_path / "sub" / "metrics.jsonl").stat().st_mode & 0o777 == mode


def _strict(text):
    def refuse(name):
        raise ValueError(f"bare {name} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_non_finite_floats_are_strict_json_and_read_back_as_floats(tmp_path):
    row = {"loss": math.nan, "up": math.inf, "down": -math.inf, "xs": [1.5, math.nan], "n": "x"}
    write_json(tmp_path / "s.json", {"final_loss": math.nan, "rows": [row]})
    write_jsonl(tmp_path / "m.jsonl", [row, {"loss": 0.5}])
    assert _strict((tmp_path / "s.json").read_text())["final_loss"] == "NaN"
    lines = (tmp_path / "m.jsonl").read_text().splitlines()
    assert _strict(lines[0]) == {
        "loss": "NaN",
        "up": "Infinity",
        "down": "-Infinity",
        "xs": [1.5, "NaN"],
        "n": "x",
    }
    back = read_jsonl(tmp_path / "m.jsonl")[0]
    assert math.isnan(back["loss"]) and back["up"] == math.inf and back["down"] == -math.inf
    assert math.isnan(back["xs"][1]) and back["n"] == "x"
    summary = read_json(tmp_path / "s.json")
    assert math.isnan(summary["final_loss"]) and math.isnan(summary["rows"][0]["loss"])


def test_older_files_with_bare_nan_still_read(tmp_path):
    (tmp_path / "old.json").write_text('{"final_loss": NaN}')
    assert math.isnan(read_json(tmp_path / "old.json")["final_loss"])


@pytest.mark.parametrize(
    "error, fix",
    [
        (OSError(errno.ENOSPC, "No space left on device"), "free some space"),
        (PermissionError(errno.EACCES, "Permission denied"), "choose a folder you can write"),
        (PermissionError(errno.EPERM, "Operation not permitted"), "immutable"),
        (OSError(errno.EROFS, "Read-only file system"), "writable file system"),
    ],
)
def test_a_failed_write_is_an_output_error_naming_the_file_and_leaves_no_temp(
    tmp_path, monkeypatch, error, fix
):
    path = tmp_path / "summary.json"

    def fail(src, dst):
        raise error

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OutputError) as e:
        write_json(path, {"final_accuracy": 0.9})
    assert str(path) in str(e.value) and fix in str(e.value) and "\n" not in str(e.value)
    assert list(tmp_path.iterdir()) == []


def test_a_file_where_the_folder_should_be_is_an_output_error(tmp_path):
    (tmp_path / "out").write_text("not a folder")
    with pytest.raises(OutputError, match="a file stands where a folder is needed"):
        write_json(tmp_path / "out" / "summary.json", {})
