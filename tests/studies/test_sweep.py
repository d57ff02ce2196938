"""``fedretain sweep``: a grid of settings and seeds, run resumably, compared in one report."""

from __future__ import annotations

import json

import pytest

from fedretain.cli import main
from fedretain.errors import ConfigError
from fedretain.studies.sweep import (
    MANIFEST,
    Axis,
    check_size,
    label,
    parse_axis,
    plan_sweep,
    points,
)

TINY = ["dataset=digits", "model=mlp", "model.hidden=[8]", "clients=6", "clients_per_round=3"]
TINY += ["rounds=2", "local_steps=2", "batch_size=16"]


def test_an_axis_is_a_comma_list_or_a_toml_list():
    assert parse_axis("algo.mu=0.001,0.01") == Axis("algo.mu", (0.001, 0.01))
    assert parse_axis("algorithm = fedavg, fedprox") == Axis("algorithm", ("fedavg", "fedprox"))
    assert parse_axis('engine.devices=[["cpu"], ["cpu", "cpu"]]').values == (
        ["cpu"],
        ["cpu", "cpu"],
    )
    for bad, why in [
        ("lr", "KEY=v1,v2"),
        ("=1,2", "KEY=v1,v2"),
        ("lr=", "KEY=v1,v2"),
        ("lr=[0.1,", "not a TOML list"),
        ("lr=0.1,0.1", "each value once"),
    ]:
        with pytest.raises(ConfigError, match=why):
            parse_axis(bad)


def test_points_are_the_product_in_the_given_order():
    grid = points([Axis("a", (1, 2)), Axis("b", ("x", "y"))])
    assert grid == [{"a": 1, "b": "x"}, {"a": 1, "b": "y"}, {"a": 2, "b": "x"}, {"a": 2, "b": "y"}]
    assert label(grid[1]) == "a=1 b=y"
    with pytest.raises(ConfigError, match="names a key twice"):
        points([Axis("a", (1,)), Axis("a", (2,))])


def test_every_point_is_checked_before_anything_runs(tmp_path):
    with pytest.raises(ConfigError, match="lr"):
        plan_sweep(None, TINY, [parse_axis("lr=0.1,-1")], tmp_path)
    assert not list(tmp_path.iterdir())
    with pytest.raises(ConfigError, match="--seeds and --grid seed"):
        plan_sweep(None, TINY, [parse_axis("seed=1,2")], tmp_path, seeds=2)


def test_a_sweep_runs_every_point_and_seed_compares_them_and_resumes(tmp_path, capsys):
    out = tmp_path / "sweep"
    args = ["sweep", *TINY, "--grid", "lr=0.05,0.2", "--seeds", "2", "--out", str(out)]
    assert main(args) == 0
    runs = sorted(p.parent.relative_to(out).as_posix() for p in out.glob("**/summary.json"))
    assert runs == ["lr-0.05/seed0", "lr-0.05/seed1", "lr-0.2/seed0", "lr-0.2/seed1"]
    config = (out / "lr-0.2" / "seed1" / "config.toml").read_text()
    assert "lr = 0.2" in config and "seed = 1" in config and 'name = "lr=0.2"' in config
    report = (out / "report.md").read_text()
    assert "## Mean over seeds" in report and "| lr=0.05 | 0, 1 |" in report
    assert "failed" not in report
    capsys.readouterr()
    before = {p: p.stat().st_mtime_ns for p in out.glob("**/metrics.jsonl")}
    assert main([*args, "model.hidden=[16]"]) == 2  # other settings into the same folders
    assert "holds a run with other settings" in capsys.readouterr().err
    assert main(args) == 0  # the same command again: nothing is run again
    assert "4 run(s) already finished: skipped" in capsys.readouterr().out
    assert {p: p.stat().st_mtime_ns for p in out.glob("**/metrics.jsonl")} == before


def test_a_failed_point_is_listed_and_the_exit_status_says_so(tmp_path, capsys):
    out = tmp_path / "sweep"
    # a CNN cannot take digits' 8x8 images: known only once the data are loaded
    base = [a for a in TINY if not a.startswith("model")]
    args = ["sweep", *base, "--grid", "model=mlp,cnn", "--out", str(out), "--jobs", "2"]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "1 run(s) failed or diverged" in err
    report = (out / "report.md").read_text()
    assert "## Runs that failed or diverged" in report and "model-cnn/seed0: failed:" in report
    assert "| model=mlp |" in report or "model=mlp (seed 0)" in report
    status = json.loads((out / "model-cnn" / "seed0" / "status.json").read_text())
    assert status["state"] == "failed" and "too small for model" in status["error"]


def test_sweep_needs_a_grid(tmp_path, capsys):
    assert main(["sweep", *TINY, "--out", str(tmp_path)]) == 2
    assert "at least one --grid" in capsys.readouterr().err


def test_threads_and_name_are_no_axis():
    with pytest.raises(ConfigError, match=r"threads do not change results.*--jobs"):
        parse_axis("threads=1,2")
    with pytest.raises(ConfigError, match="names each run after its point"):
        parse_axis("name=a,b")


def test_too_many_runs_are_refused_before_any_config_is_built(tmp_path, capsys, monkeypatch):
    import fedretain.studies.sweep as sweep_module

    def never(*args, **kwargs):
        raise AssertionError("a config was built")

    monkeypatch.setattr(sweep_module, "load_config", never)
    monkeypatch.setattr(sweep_module, "config_values", never)
    out = tmp_path / "sweep"
    args = ["sweep", *TINY, "--grid", "lr=0.05,0.2", "--seeds", "1000000", "--out", str(out)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "2,000,000 runs" in err and "--max-runs 2000000" in err and not out.exists()
    assert check_size([parse_axis("lr=0.1,0.2,0.3")], seeds=2, max_runs=6) == 6
    with pytest.raises(ConfigError, match="more than --max-runs 5"):
        check_size([parse_axis("lr=0.1,0.2,0.3")], seeds=2, max_runs=5)


def test_a_sweep_refuses_a_run_folder_or_files_it_did_not_write(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.toml").write_text("rounds = 2\n")
    (run / "summary.json").write_text("{}")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "figure.png").write_bytes(b"the user's figure")
    for out, what in [(run, "holds a fedretain run (config.toml)"), (mine, "figure.png")]:
        before = sorted(p.name for p in out.iterdir())
        for extra in ([], ["--overwrite"]):
            code = main(["sweep", *TINY, "--grid", "lr=0.05", "--out", str(out), *extra])
            err = capsys.readouterr().err.strip()
            assert code == 2 and what in err and "nothing was written" in err
            assert len(err.splitlines()) == 1
        assert sorted(p.name for p in out.iterdir()) == before


def test_overwrite_removes_only_what_the_sweep_wrote(tmp_path, capsys):
    out = tmp_path / "sweep"
    base = [a for a in TINY if not a.startswith("rounds=")] + ["rounds=1"]
    args = ["sweep", *base, "--grid", "lr=0.05", "--out", str(out)]
    assert main(args) == 0
    assert json.loads((out / MANIFEST).read_text()) == {"points": ["lr-0.05"]}
    # a sweep folder written before the manifest existed is still the sweep's
    (out / MANIFEST).unlink()
    capsys.readouterr()
    assert main(args) == 0 and "1 run(s) already finished" in capsys.readouterr().out
    # a file of the user's inside a run's folder: --overwrite removes nothing
    (out / "lr-0.05" / "seed0" / "notes.txt").write_text("keep me")
    code = main([*args[:-4], "--grid", "lr=0.2", "--out", str(out), "--overwrite"])
    assert code == 2 and "notes.txt was not written by a sweep" in capsys.readouterr().err
    assert (out / "lr-0.05" / "seed0" / "summary.json").is_file()
    (out / "lr-0.05" / "seed0" / "notes.txt").unlink()
    assert main([*args[:-4], "--grid", "lr=0.2", "--out", str(out), "--overwrite"]) == 0
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["lr-0.2"]
    assert json.loads((out / MANIFEST).read_text()) == {"points": ["lr-0.2"]}
    assert "lr=0.05" not in (out / "report.md").read_text()


def test_a_second_driver_on_the_same_out_is_refused_with_nothing_written(tmp_path, capsys):
    """While one sweep or reproduce writes a folder (its lock held, here by another process),
    a second on the same --out stops at once, naming the holder; once the first is gone the
    same command runs."""
    import subprocess
    import sys

    out = tmp_path / "sweep"
    hold = (
        "import sys, time; from fedretain.files import driver_lock\n"
        "with driver_lock(sys.argv[1], 'sweep'):\n"
        "    print('held', flush=True); time.sleep(60)\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", hold, str(out)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        args = ["sweep", *TINY, "--grid", "lr=0.05,0.2", "--out", str(out)]
        assert main(args) == 2
        err = capsys.readouterr().err
        assert f"being written by fedretain sweep (pid {holder.pid} on" in err
        assert err.count("\n") == 1
        assert main(["reproduce", "demo", "--scale", "ci", "--out", str(out)]) == 2
        assert "being written by fedretain sweep" in capsys.readouterr().err
        assert sorted(p.name for p in out.iterdir()) == [".fedretain.lock"]
    finally:
        holder.kill()
        holder.wait()
    assert main(args) == 0  # the lock went with its process; its file is no stranger
    assert len(list(out.glob("**/summary.json"))) == 2
