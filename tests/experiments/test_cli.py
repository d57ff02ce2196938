"""The command line end to end, on scikit-learn's digits (no files needed) and small IDX files."""

import errno
import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fedretain.cli import main
from fedretain.files import read_json, read_jsonl

FAST = [
    "dataset=digits",
    "model=mlp",
    "model.hidden=[32]",
    "clients=10",
    "clients_per_round=4",
    "rounds=3",
    "batch_size=20",
    "lr=0.1",
    "partition=shards",
]


def run_cli(argv, capsys):
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_run_writes_the_results_contract(tmp_path, capsys):
    out = tmp_path / "run"
    code, stdout, stderr = run_cli(["run", *FAST, "algorithm=scaffold", "--out", str(out)], capsys)
    assert code == 0 and "final accuracy" in stdout
    assert stderr == ""  # the progress bar stays quiet when stderr is not a terminal
    for name in ("config.toml", "metrics.jsonl", "summary.json", "accuracy.png"):
        assert (out / name).is_file(), name
    rows = read_jsonl(out / "metrics.jsonl")
    assert [r["round"] for r in rows] == [0, 1, 2, 3]
    for key in ("test_accuracy", "test_loss", "bytes_up", "bytes_down", "seconds"):
        assert key in rows[-1]
    assert rows[-1]["bytes_up"] > rows[1]["bytes_up"] > 0
    summary = json.loads((out / "summary.json").read_text())
    for key in ("final_accuracy", "top_accuracy", "rounds", "bytes_up", "bytes_down"):
        assert key in summary
    assert summary["final_accuracy"] == rows[-1]["test_accuracy"]
    assert set(summary["rounds_to"]) == {"0.5", "0.6", "0.7", "0.8", "0.9"}
    assert summary["clients_with_state"] > 0
    assert not list(out.glob(".*.tmp"))  # no temporary files left behind


def test_same_seed_same_metrics_other_seed_differs(tmp_path, capsys):
    def metrics(name, seed):
        run_cli(["run", *FAST, f"seed={seed}", "--out", str(tmp_path / name)], capsys)
        rows = read_jsonl(tmp_path / name / "metrics.jsonl")
        return [{k: v for k, v in r.items() if k != "seconds"} for r in rows]

    a, b, c = metrics("a", 0), metrics("b", 0), metrics("c", 1)
    assert a == b
    assert a != c


def test_learning_happens_on_digits(tmp_path, capsys):
    args = [*FAST[:-1], "partition=iid", "rounds=8", "local_epochs=2"]
    run_cli(["run", *args, "--out", str(tmp_path / "r")], capsys)
    rows = read_jsonl(tmp_path / "r" / "metrics.jsonl")
    assert rows[-1]["test_accuracy"] > 0.8 > rows[0]["test_accuracy"]


def test_compare_writes_report_and_plots(tmp_path, capsys):
    for algo in ("sgd", "fedavg"):
        run_cli(["run", *FAST, f"algorithm={algo}", "--out", str(tmp_path / algo)], capsys)
    report = tmp_path / "report"
    code, _, _ = run_cli(
        [
            "compare",
            str(tmp_path / "sgd"),
            str(tmp_path / "fedavg"),
            "--out",
            str(report),
            "--reference",
            str(tmp_path / "sgd"),
        ],
        capsys,
    )
    assert code == 0
    text = (report / "report.md").read_text()
    assert "| sgd |" in text and "| fedavg |" in text and "R_0.9" in text
    assert (report / "accuracy_vs_round.png").stat().st_size > 1000
    assert (report / "accuracy_vs_bytes.png").stat().st_size > 1000


def test_compare_over_seeds_uses_each_seeds_reference(tmp_path, capsys):
    from fedretain.metrics.accuracy import r_a

    for seed in (0, 1):
        for algo in ("sgd", "fedavg"):
            out = str(tmp_path / f"s{seed}" / algo)
            run_cli(["run", *FAST, f"algorithm={algo}", f"seed={seed}", "--out", out], capsys)
    runs = [str(tmp_path / f"s{s}" / "fedavg") for s in (0, 1)]
    refs = [a for s in (0, 1) for a in ("--reference", str(tmp_path / f"s{s}" / "sgd"))]
    code, _, _ = run_cli(["compare", *runs, *refs, "--out", str(tmp_path / "rep")], capsys)
    assert code == 0
    data = json.loads((tmp_path / "rep" / "report.json").read_text())
    for seed, row in enumerate(data["runs"]):
        assert row["name"] == f"fedavg (seed {seed})"
        assert row["reference"] == str(tmp_path / f"s{seed}" / "sgd")
        sgd = json.loads((tmp_path / f"s{seed}" / "sgd" / "summary.json").read_text())
        records = read_jsonl(tmp_path / f"s{seed}" / "fedavg" / "metrics.jsonl")
        assert row["R_a"]["0.9"] == r_a(records, sgd["final_accuracy"], 0.9)
    text = (tmp_path / "rep" / "report.md").read_text()
    assert "## Mean over seeds" in text and "| fedavg | 0, 1 |" in text and " ± " in text
    # a reference for seed 0 only cannot serve a seed-1 run when references are per seed
    code, _, err = run_cli(
        ["compare", *runs, *refs[:2], *refs[:2], "--out", str(tmp_path / "bad")], capsys
    )
    assert code == 2 and "one per seed" in err


def test_list_prints_one_line_each(capsys):
    code, out, _ = run_cli(["list", "algorithms"], capsys)
    assert code == 0
    names = [line.split()[0] for line in out.strip().splitlines()]
    from fedretain.algorithms import ALGORITHMS

    assert names == list(ALGORITHMS)
    for required in ("sgd", "fedavg", "fedavgm", "fedprox", "fedproxm", "scaffold", "gradma"):
        assert required in names


def test_list_takes_each_kind_in_the_singular_or_plural_with_a_did_you_mean(capsys):
    from fedretain.cli import LISTS, list_kind

    for plural, k in LISTS.items():
        for what in (plural, k, k.replace("_", "-"), plural.upper()):
            assert list_kind(what) == k, what
    assert list_kind("server_opt") == list_kind("server-opts") == "server_opt"
    code, out, _ = run_cli(["list", "optimizer", "--params"], capsys)
    assert code == 0 and "optimizer.momentum=" in out
    code, _, err = run_cli(["list", "optimzer"], capsys)
    line = _one_error_line(err)
    assert code == 2 and "did you mean 'optimizer'?" in line and "optimizers" in line


def test_every_list_command_the_help_and_docs_quote_works(capsys, monkeypatch):
    """Each `fedretain list ...` that run --help, the README and the docs tell users to type."""
    root = Path(__file__).resolve().parents[2]
    monkeypatch.setenv("COLUMNS", "100")
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    texts = {"run --help": capsys.readouterr().out, "README.md": (root / "README.md").read_text()}
    texts |= {p.name: p.read_text() for p in sorted((root / "docs").glob("*.md"))}
    commands = {
        " ".join(m.group(0).split()[2:])
        for name, text in texts.items()
        for m in re.finditer(r"fedretain\s+list\s+[\w-]+(\s+--params)?", " ".join(text.split()))
    }
    assert {"algorithms --params", "optimizer --params", "participation", "replay"} <= commands
    assert "optimizers --params" in commands and "server-opts --params" in commands
    for command in sorted(commands):
        code, out, err = run_cli(["list", *command.split()], capsys)
        assert code == 0 and out and not err, command


def test_partition_command_prints_summary_and_heatmap(tmp_path, capsys):
    png = tmp_path / "heat.png"
    code, out, _ = run_cli(
        [
            "partition",
            "dataset=digits",
            "clients=20",
            "partition=dirichlet",
            "partition.alpha=0.1",
            "--out",
            str(png),
        ],
        capsys,
    )
    assert code == 0 and "20" in out and png.stat().st_size > 1000
    assert png.read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize(("name", "magic"), [("heat.pdf", b"%PDF"), ("heat.svg", b"<?xml")])
def test_a_heat_map_is_written_in_the_format_its_suffix_names(tmp_path, capsys, name, magic):
    out = tmp_path / name
    args = ["dataset=digits", "clients=20", "partition=dirichlet", "partition.alpha=0.1"]
    code, _, _ = run_cli(["partition", *args, "--out", str(out)], capsys)
    assert code == 0 and out.read_bytes().startswith(magic)


def test_a_heat_map_of_an_unknown_suffix_is_refused_before_anything_is_computed(tmp_path, capsys):
    for name in ("heat.txt", "heat"):
        out = tmp_path / name
        code, stdout, err = run_cli(["partition", "dataset=digits", "--out", str(out)], capsys)
        line = _one_error_line(err)
        assert code == 2 and ".png, .ps, .raw" in line and ".pdf" in line and ".svg" in line
        assert stdout == "" and not out.exists()


def _corrupt_idx_dir(tmp_path):
    d = tmp_path / "fm"
    d.mkdir()
    for name in (
        "train-images-idx3-ubyte",
        "train-labels-idx1-ubyte",
        "t10k-images-idx3-ubyte",
        "t10k-labels-idx1-ubyte",
    ):
        (d / f"{name}.gz").write_bytes(gzip.compress(b"\x00\x00\x08\x03" + b"\x00" * 7))
    return d


@pytest.mark.parametrize(
    "args, message",
    [
        (["algorithm=fedavgg"], "unknown algorithm 'fedavgg'"),
        (["partition=dirichlet", "partition.alpha=0"], "alpha"),
        (["partition=dirichlet", "partition.alpha=-1"], "alpha"),
        (["clients=5000", "clients_per_round=10"], "clients"),
        (["dataset=fashion-mnist", "data_dir=/nonexistent/fm"], "/nonexistent/fm"),
        (["--config", "BAD_TOML"], "not valid TOML"),
        (["dataset=fashion-mnist", "data_dir=CORRUPT"], "corrupt|truncated"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message, tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text("rounds = [\n")
    corrupt = _corrupt_idx_dir(tmp_path)
    args = [a.replace("BAD_TOML", str(bad)).replace("CORRUPT", str(corrupt)) for a in args]
    fast = [a for a in FAST if not a.startswith(("partition=", "clients="))]
    if any(a.startswith("dataset=") for a in args):
        fast = [a for a in fast if not a.startswith("dataset=")]
    code, _, err = run_cli(["run", *fast, *args, "--out", str(tmp_path / "x")], capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert __import__("re").search(message, lines[0]), lines[0]


def test_error_from_a_real_process_has_no_traceback(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "fedretain.cli", "run", "algorithm=nope", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: unknown algorithm 'nope'")


FMNIST = Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")


@pytest.mark.skipif(not FMNIST.exists(), reason="apt-get install dataset-fashion-mnist")
def test_real_fashion_mnist_pathological_run(tmp_path, capsys):
    args = [
        "dataset=fashion-mnist",
        "model=mlp",
        "model.hidden=[64]",
        "partition=shards",
        "partition.classes_per_client=2",
        "clients=100",
        "clients_per_round=10",
        "rounds=5",
        "lr=0.05",
        "eval_batch_size=5000",
    ]
    code, _, _ = run_cli(["run", *args, "--out", str(tmp_path / "fm")], capsys)
    assert code == 0
    summary = json.loads((tmp_path / "fm" / "summary.json").read_text())
    assert summary["client_samples"]["min"] == summary["client_samples"]["max"] == 600
    assert summary["final_accuracy"] > 0.3  # 10 % is chance on 10 classes


def test_validate_checks_config_and_data_without_training(tmp_path, capsys):
    exp = tmp_path / "exp.toml"
    exp.write_text('dataset = "digits"\nmodel = "mlp"\nclients = 10\n[partition]\nname = "iid"\n')
    code, out, _ = run_cli(["validate", str(exp), "rounds=7"], capsys)
    ok = out.splitlines()[-1]
    assert code == 0 and ok.startswith("ok: fedavg on digits") and "10 clients" in ok
    assert "engine=auto: " in out  # the engine is built too: its choice is printed
    assert "7 rounds" in ok and not list(tmp_path.glob("*/metrics.jsonl"))
    code, _, err = run_cli(["validate", str(exp), "clients=100000"], capsys)
    assert code == 2 and "more clients (100000) than samples" in err
    # the engine's options are checked (they were only refused when a run started)
    code, _, err = run_cli(["validate", str(exp), "engine=sequential", "engine.workers=0"], capsys)
    assert code == 2 and "engine.workers must be an integer >= 1" in err


def test_run_needs_out_or_resume(capsys):
    code, _, err = run_cli(["run", "dataset=digits"], capsys)
    assert code == 2 and "--out" in err


def test_version_is_the_package_metadata(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"fedretain {version('fedretain')}"


def test_run_help_names_every_key_its_default_and_meaning(capsys):
    import dataclasses

    from fedretain.recipe.config import COMPONENTS, Config, describe_settings
    from fedretain.registry import kind

    with pytest.raises(SystemExit) as e:
        main(["run", "--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    params_fields = {c.params_field for c in COMPONENTS.values()}
    for f in dataclasses.fields(Config):
        if f.name not in params_fields:
            assert f"  {f.name} = " in text, f.name
    for s in describe_settings():
        assert f"  {s.key} = {s.default}\n" in text and s.help.split()[0] in text, s.key
    assert '  algorithm = "fedavg"' in text and "  rounds = 20" in text
    for prefix, comp in COMPONENTS.items():
        assert f"  {prefix}.<option>:" in text, prefix
        for name in kind(comp.kind):  # every registered entry with its options
            assert f"      {name}: " in text, (prefix, name)
    assert "algo.mu=0.01" in text and "engine.chunk=0" in text
    assert "partition.alpha=" in text


def _one_error_line(err):
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def test_run_refuses_an_existing_run_unless_resume_or_overwrite(tmp_path, capsys):
    out = tmp_path / "run"
    assert (
        run_cli(
            ["run", *FAST, "algorithm=fedavg", "diagnostics=forgetting", "--out", str(out)], capsys
        )[0]
        == 0
    )
    assert (out / "forgetting.jsonl").is_file()
    before = (out / "metrics.jsonl").read_text()
    code, _, err = run_cli(["run", *FAST, "algorithm=scaffold", "--out", str(out)], capsys)
    line = _one_error_line(err)
    assert code == 2 and f"{out} already holds a finished run" in line
    assert "--resume" in line and "--overwrite" in line
    assert (out / "metrics.jsonl").read_text() == before  # untouched
    code, _, _ = run_cli(
        ["run", *FAST, "algorithm=scaffold", "--out", str(out), "--overwrite"], capsys
    )
    assert code == 0 and not (out / "forgetting.jsonl").exists()  # the old run's files went
    assert read_json(out / "summary.json")["algorithm"] == "scaffold"


def test_overwrite_refuses_a_folder_that_is_not_a_results_folder(tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "config.toml").write_text("rounds = 3\n")  # the user's own config
    (out / "notes.txt").write_text("keep me")
    for extra in ([], ["--overwrite"]):
        code, _, err = run_cli(["run", *FAST, "--out", str(out), *extra], capsys)
        line = _one_error_line(err)
        assert code == 2 and "does not look like a fedretain results folder" in line
        assert "notes.txt" in line and "nothing was removed" in line
    assert sorted(p.name for p in out.iterdir()) == ["config.toml", "notes.txt"]
    (out / "notes.txt").unlink()  # a config alone is no run either
    code, _, err = run_cli(["run", *FAST, "--out", str(out), "--overwrite"], capsys)
    assert code == 2 and "no metrics.jsonl" in err and (out / "config.toml").is_file()


def test_overwrite_keeps_a_file_no_run_writes(tmp_path, capsys):
    out = tmp_path / "run"
    one = [a for a in FAST if not a.startswith("rounds=")] + ["rounds=1"]
    assert run_cli(["run", *one, "--out", str(out)], capsys)[0] == 0
    (out / "figure.png").write_bytes(b"the user's figure")  # a suffix a run writes, not a name
    code, _, err = run_cli(["run", *one, "lr=0.05", "--out", str(out), "--overwrite"], capsys)
    line = _one_error_line(err)
    assert code == 2 and "figure.png" in line and "nothing was removed" in line
    assert (out / "figure.png").read_bytes() == b"the user's figure"
    assert read_json(out / "summary.json")["rounds"] == 1  # the old run is still there


def test_run_into_an_empty_folder_needs_no_overwrite(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert run_cli(["run", *FAST, "--out", str(tmp_path / "empty")], capsys)[0] == 0


def _failing_replace(error):
    def replace(src, dst):
        raise error

    return replace


@pytest.mark.parametrize(
    "error, fix",
    [
        (PermissionError(errno.EACCES, "Permission denied"), "choose a folder you can write to"),
        (PermissionError(errno.EPERM, "Operation not permitted"), "immutable"),
        (OSError(errno.EROFS, "Read-only file system"), "writable file system"),
        (OSError(errno.ENOSPC, "No space left on device"), "free some space"),
    ],
)
@pytest.mark.parametrize("command", ["run", "compare", "partition"])
def test_a_file_system_error_is_one_line_naming_the_path_and_exit_2(
    tmp_path, capsys, monkeypatch, command, error, fix
):
    if command == "compare":  # a finished run to compare, written before the disk "fails"
        assert run_cli(["run", *FAST, "--out", str(tmp_path / "a")], capsys)[0] == 0
    argv = {
        "run": ["run", *FAST, "--out", str(tmp_path / "out")],
        "compare": ["compare", str(tmp_path / "a"), "--out", str(tmp_path / "out")],
        "partition": ["partition", "dataset=digits", "--out", str(tmp_path / "out" / "p.png")],
    }[command]
    monkeypatch.setattr(os, "replace", _failing_replace(error))
    code, _, err = run_cli(argv, capsys)
    line = _one_error_line(err)
    assert code == 2 and f"cannot write {tmp_path / 'out'}" in line
    assert error.strerror in line and fix in line


@pytest.mark.parametrize("command", ["run", "compare", "partition"])
def test_out_a_file_is_one_line_and_exit_2(tmp_path, capsys, command):
    if command == "compare":
        assert run_cli(["run", *FAST, "--out", str(tmp_path / "a")], capsys)[0] == 0
    blocker = tmp_path / "blocker"
    blocker.write_text("a file")
    argv = {
        "run": ["run", *FAST, "--out", str(blocker)],
        "compare": ["compare", str(tmp_path / "a"), "--out", str(blocker)],
        "partition": ["partition", "dataset=digits", "--out", str(blocker / "p.png")],
    }[command]
    code, _, err = run_cli(argv, capsys)
    line = _one_error_line(err)
    assert code == 2 and str(blocker) in line
    assert "is a file, not a folder" in line or "a file stands where a folder is needed" in line
    assert blocker.read_text() == "a file"


def test_a_real_process_out_of_permission_prints_no_traceback(tmp_path, capsys):
    """A file-system error raised outside fedretain's writers still ends as one line."""
    assert run_cli(["run", *FAST, "--out", str(tmp_path / "a")], capsys)[0] == 0
    report = tmp_path / "new" / "report"
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import errno, os, sys; from fedretain.cli import main\n"
            "def deny(*a, **k): raise PermissionError(errno.EACCES, 'Permission denied', a[0])\n"
            "os.mkdir = deny\n"
            "sys.exit(main(sys.argv[1:]))",
            "compare",
            str(tmp_path / "a"),
            "--out",
            str(report),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    line = _one_error_line(proc.stderr)
    assert f"cannot use {report}: Permission denied" in line, line
    assert "choose a folder you can write to" in line


def test_resume_says_where_it_continues(tmp_path, capsys):
    out = tmp_path / "run"
    run_cli(["run", *FAST, "rounds=2", "checkpoint_every=1", "--out", str(out)], capsys)
    code, _, err = run_cli(["run", "--resume", str(out), "rounds=3"], capsys)
    assert code == 0
    assert f"resuming {out} from round 2 of 3 (checkpoint state-2.safetensors)" in err
    code, _, err = run_cli(["run", "--resume", str(out), "--overwrite"], capsys)
    assert code == 2 and "drop --config/--out/--overwrite" in err
    # fewer rounds than the run has: refused, its config.toml untouched
    before = (out / "config.toml").read_text()
    code, _, err = run_cli(["run", "--resume", str(out), "rounds=2"], capsys)
    line = _one_error_line(err)
    assert code == 2 and "the run already has 3 rounds; rounds can only be extended" in line
    assert (out / "config.toml").read_text() == before
    missing = tmp_path / "doesnotexist"
    code, _, err = run_cli(["run", "--resume", str(missing)], capsys)
    line = _one_error_line(err)
    assert code == 2 and f"{missing} does not exist" in line and "--out" in line


def test_a_run_that_skipped_every_update_says_the_model_never_trained(tmp_path, capsys):
    one = [a for a in FAST if not a.startswith(("rounds=", "lr="))] + ["rounds=2", "lr=1e30"]
    code, out, err = run_cli(["run", *one, "on_divergence=skip", "--out", str(tmp_path)], capsys)
    assert code == 0 and "8 client updates skipped" in out  # 4 clients x 2 rounds
    assert "warning: every client update of the run was skipped (8 of 8" in err
    assert "the model never trained" in err


def test_no_noise_is_a_warning_that_epsilon_is_infinite(tmp_path, capsys):
    one = [a for a in FAST if not a.startswith("rounds=")] + ["rounds=1"]
    dp = ["privacy=dpsgd", "privacy.noise_multiplier=0"]
    code, _, err = run_cli(["run", *one, *dp, "--out", str(tmp_path)], capsys)
    assert code == 0
    assert "warning: privacy.noise_multiplier=0: no noise, so ε is infinite" in err
    assert read_jsonl(tmp_path / "metrics.jsonl")[-1]["epsilon"] == float("inf")


def test_progress_lines_when_stderr_is_not_a_terminal(capsys):
    from fedretain.experiments.progress import Progress

    with Progress("FedAvg", 3, every=0) as bar:
        bar.update(1, 0.61234)
        bar.update(2, None)
    err = capsys.readouterr().err
    assert err == "FedAvg round 1/3 acc 0.6123 (0 s)\nFedAvg round 2/3 acc - (0 s)\n"
    with Progress("FedAvg", 3, every=3600) as bar:  # nothing is due within the hour
        bar.update(1, 0.5)
        bar.update(3, 0.7)
    assert capsys.readouterr().err == ""


def test_progress_lines_end_with_the_last_round_once_any_was_printed(capsys):
    import time

    from fedretain.experiments.progress import Progress

    with Progress("FedAvg", 3) as bar:
        bar.started = bar.last = time.monotonic() - 40  # the first round took 40 s
        bar.update(1, 0.5)
        bar.update(2, 0.55)  # not due: 30 s have not passed since the last line
        bar.update(3, 0.6)  # the last round
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["FedAvg round 1/3 acc 0.5000 (40 s)", "FedAvg round 3/3 acc 0.6000 (40 s)"]


def test_run_and_validate_take_the_config_either_way(tmp_path, capsys):
    exp = tmp_path / "exp.toml"
    exp.write_text('dataset = "digits"\nmodel = "mlp"\nclients = 10\nrounds = 1\n')
    code, out, _ = run_cli(["validate", "--config", str(exp), "rounds=2"], capsys)
    assert code == 0 and "2 rounds" in out
    code, _, _ = run_cli(["run", str(exp), "batch_size=20", "--out", str(tmp_path / "r")], capsys)
    assert code == 0 and [r["round"] for r in read_jsonl(tmp_path / "r" / "metrics.jsonl")] == [
        0,
        1,
    ]
    code, _, err = run_cli(["validate", str(exp), "--config", str(exp)], capsys)
    assert code == 2 and "one config file at a time" in err
    code, out, _ = run_cli(["partition", str(exp)], capsys)
    assert code == 0 and "10" in out


def test_compare_refuses_mixed_runs_unless_allowed(tmp_path, capsys):
    run_cli(["run", *FAST, "--out", str(tmp_path / "shards")], capsys)
    iid = [a for a in FAST if not a.startswith("partition=")] + ["partition=iid"]
    run_cli(["run", *iid, "model.hidden=[16]", "--out", str(tmp_path / "iid")], capsys)
    dirs = [str(tmp_path / "shards"), str(tmp_path / "iid")]
    code, _, err = run_cli(["compare", *dirs, "--out", str(tmp_path / "rep")], capsys)
    line = _one_error_line(err)
    assert code == 2 and "the runs differ in model, partition" in line and "--allow-mixed" in line
    assert "partition shards(" in line and "partition iid" in line and "hidden=[16]" in line
    assert not (tmp_path / "rep").exists()
    code, _, _ = run_cli(
        ["compare", *dirs, "--out", str(tmp_path / "rep"), "--allow-mixed"], capsys
    )
    assert code == 0
    text = (tmp_path / "rep" / "report.md").read_text()
    assert (
        "Settings that differ between the runs:" in text
        and "| run | model.hidden | partition |" in text
    )
    assert "shards(" in text and " | iid |" in text
    rows = read_json(tmp_path / "rep" / "report.json")["runs"]
    assert [r["settings"]["partition"].split("(")[0] for r in rows] == ["shards", "iid"]


def test_compare_lists_every_setting_that_differs_and_refuses_a_folder_twice(tmp_path, capsys):
    one = [a for a in FAST if not a.startswith("rounds=")] + ["rounds=1"]
    run_cli(["run", *one, "--out", str(tmp_path / "a")], capsys)
    other = ["lr=0.05", "local_steps=2", "batch_size=10", "optimizer.momentum=0.9"]
    run_cli(["run", *one, *other, "--out", str(tmp_path / "b")], capsys)
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    code, _, _ = run_cli(["compare", *dirs, "--out", str(tmp_path / "rep")], capsys)
    assert code == 0
    rows = read_json(tmp_path / "rep" / "report.json")["runs"]
    assert [r["settings"] for r in rows] == [
        {"local_steps": "0", "batch_size": "20", "lr": "0.1", "optimizer.momentum": "0.0"},
        {"local_steps": "2", "batch_size": "10", "lr": "0.05", "optimizer.momentum": "0.9"},
    ]
    assert rows[0]["name"] != rows[1]["name"]  # both are "fedavg": told apart
    text = (tmp_path / "rep" / "report.md").read_text()
    assert "| run | local_steps | batch_size | lr | optimizer.momentum |" in text
    # the same folder twice (however it is spelled) is refused, nothing written
    for again in (dirs[0], dirs[0] + "/", str(tmp_path / "b" / ".." / "a")):
        code, _, err = run_cli(["compare", dirs[0], again, "--out", str(tmp_path / "r2")], capsys)
        line = _one_error_line(err)
        assert code == 2 and "is given twice" in line and "give each folder once" in line
    assert not (tmp_path / "r2").exists()


def _help_of(argv, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")  # argparse's width: each help text on one line
    with pytest.raises(SystemExit) as e:
        main([*argv, "--help"])
    assert e.value.code == 0
    return capsys.readouterr().out


def _names(text):
    """``a, b (default) or c`` -> ``[a, b, c]``: the names of a help's choice list."""
    text = " ".join(re.sub(r"\([^)]*\)", "", text).split())
    return [n for n in re.split(r"\s*,\s*|\s+or\s+", text) if n]


def _blocks(text):
    """A help tail's blocks, each a line at column 2 and the lines below it, by first word."""
    blocks = re.split(r"\n  (?=\S)", text)[1:]
    return {re.split(r"[ .]", b, maxsplit=1)[0]: b for b in blocks}


def test_each_kind_a_help_names_is_listed_exactly_as_its_registry(capsys, monkeypatch):
    from fedretain.cli import LISTS
    from fedretain.privacy.attacks import METHODS
    from fedretain.recipe.config import COMPONENTS, NAMED
    from fedretain.registry import kind, kinds
    from fedretain.studies.presets import SCALES

    # `list WHAT`: one WHAT per kind a config chooses from (every kind declared but the
    # presets, which `reproduce --list` lists), and nothing else
    assert sorted(LISTS.values()) == sorted(set(kinds()) - {"preset"})
    assert len(LISTS) == len(set(LISTS.values()))
    listed = re.search(r"the kind of component: (.*)", _help_of(["list"], capsys, monkeypatch))
    assert _names(listed.group(1)) == list(LISTS)

    run_help = _help_of(["run"], capsys, monkeypatch)
    settings, _, options = run_help.partition("\ncomponent options")
    keys = _blocks(settings)
    for prefix, comp in COMPONENTS.items():
        # the key choosing the component: its registry's names, in its order
        choices = re.search(r"\n      choices: (.*?)\n      options: ", keys[comp.name_field], re.S)
        assert choices and _names(choices.group(1)) == list(kind(comp.kind)), comp.name_field
        # its options' section: one entry per name, the name at column 6
        entries = re.findall(r"^      (\S+): ", _blocks(options)[prefix], re.M)
        assert entries == list(kind(comp.kind)), prefix
    for key, k in NAMED.items():  # a component without options: its entries under its key
        assert re.findall(r"^      (\S+): ", keys[key], re.M) == list(kind(k)), key

    # the examples of every help name registered components
    names = {c.name_field: c.kind for c in COMPONENTS.values()} | NAMED
    helps = [run_help] + [
        _help_of([c], capsys, monkeypatch)
        for c in ("validate", "compare", "partition", "privacy", "reproduce")
    ]
    examples = [
        (key, value)
        for text in helps
        for key, value in re.findall(r"(?<![\w.])(\w+)=([a-z][\w-]*)", text)
        if key in names
    ]
    assert ("algorithm", "scaffold") in examples and ("partition", "dirichlet") in examples
    for key, value in examples:
        assert value in kind(names[key]), (key, value)

    # lists that are no registry's: the attacks and the presets' scales
    privacy_help = _help_of(["privacy"], capsys, monkeypatch)
    attack = re.search(r"--attack ATTACK +(.*)", privacy_help).group(1)
    assert sorted(_names(attack)) == sorted(METHODS)
    scale = re.search(r"--scale SCALE +(.*)", _help_of(["reproduce"], capsys, monkeypatch))
    assert _names(scale.group(1)) == list(SCALES)
