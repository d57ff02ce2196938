"""The command line end to end, on scikit-learn's digits (no files needed) and small IDX files."""

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from fedretain.cli import main
from fedretain.files import read_jsonl

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
