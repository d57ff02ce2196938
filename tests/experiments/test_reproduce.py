"""`fedretain reproduce`: every preset at scale=ci, resumability, the report's claims and the
demo's generated paragraph."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from fedretain.cli import main
from fedretain.errors import ConfigError
from fedretain.experiments.presets import PRESETS, SCALES, Data, Values
from fedretain.experiments.privacy import table_rows
from fedretain.experiments.reproduce import as_args, preset_names, reproduce, resolve_data
from fedretain.experiments.run import run_experiment
from fedretain.files import read_jsonl
from fedretain.recipe.config import load_config
from tests.data.test_data_cifar import write_cifar10

FMNIST = Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz").exists()
VERDICTS = ("**held**", "**did not hold**", "**undecided**", "not run (data missing)")


@pytest.fixture(scope="module")
def ci(tmp_path_factory: pytest.TempPathFactory):
    """Runs a preset at scale=ci into one module-wide folder (once: reproduce skips finished
    runs), with tiny CIFAR-10 files; returns the preset's folder."""
    root = tmp_path_factory.mktemp("ci")
    write_cifar10(root / "cifar", per_batch=20)  # 100 training images, 10 per class

    def run(name: str, **kwargs) -> Path:
        out = root / name
        kwargs.setdefault("data_dirs", [f"cifar10={root / 'cifar'}"])
        reproduce([name], out, scale="ci", echo=kwargs.pop("echo", lambda s: None), **kwargs)
        return out

    return run


def plan_of(name: str, data_dirs: list[str] | None = None):
    entry = PRESETS.get(name)
    data = resolve_data(entry.meta["dataset"], entry.meta.get("standin"), data_dirs or [])
    return entry.factory("ci", [0], data), data


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_preset_runs_at_ci_and_reports_every_claim(ci, name):
    out = ci(name)
    text = (out / "report.md").read_text()
    plan, data = plan_of(name, [f"cifar10={out.parent / 'cifar'}"])
    assert f"fedretain reproduce {name} --out {out} --scale ci --seeds 1" in text
    for claim in plan.claims:  # every claim, with a verdict
        row = next(line for line in text.splitlines() if f"| {claim.text} |" in line)
        assert any(v in row for v in VERDICTS), row
    if data.missing:
        assert not FMNIST and "Not run: the data are missing" in text
        return
    assert f"Runs: {len(plan.runs)} of {len(plan.runs)} finished" in text
    assert "Runs that failed" not in text
    for image in re.findall(r"\]\(([^)]+\.png)\)", text):
        assert (out / image).is_file(), image
    for spec in plan.runs:
        done = "privacy.json" if spec.study is not None else "summary.json"
        assert (out / spec.folder / done).is_file()


def test_fedcil_report_shows_each_methods_accuracy_matrix_and_generator_quality(ci):
    out = ci("fedcil-table1")
    if not FMNIST:
        pytest.skip("Fashion-MNIST is not installed")
    plan, _ = plan_of("fedcil-table1")
    fedcil = next(s for s in plan.runs if s.method == "FedCIL")
    matrix = json.loads((out / fedcil.folder / "summary.json").read_text())["accuracy_matrix"]
    text = (out / "report.md").read_text()
    table = text[text.index("FedCIL: accuracy on each task's classes after each task") :]
    last = next(line for line in table.splitlines() if line.startswith("| task 5 |"))
    assert last == "| task 5 | " + " | ".join(f"{a:.3f}" for a in matrix[-1]) + " |"
    assert "fid-" not in text  # scale=ci records no generator quality
    rows = [{"round": 0, "task": 0, "fid": 30.0}, {"round": 4, "task": 4, "fid": 12.0}]
    quality = out / fedcil.folder / "generator_quality.jsonl"
    quality.write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = (ci("fedcil-table1") / "report.md").read_text()  # the report again, no run redone
    assert "Last values: FedCIL 12.0 (round 4)." in text
    image = re.search(r"\]\((fid-[^)]+\.png)\)", text)
    assert image and (out / image.group(1)).is_file()


def test_fedreg_report_relates_accuracy_swings_to_the_classes_each_round_held(ci):
    text = (ci("fedreg-table1") / "report.md").read_text().splitlines()
    title = "### one class, 5,000 clients: accuracy change against the classes"
    at = next(i for i, line in enumerate(text) if line.startswith(title))
    head = text[at + 4]
    # scale=ci: 2 one-class clients a round, evaluated every round: 1 or 2 classes held
    counts = [int(c.split()[0]) for c in head.strip("|").split("|")[1:-1]]
    assert counts and set(counts) <= {1, 2}, head
    rows = [line for line in text[at + 6 : at + 12] if line.startswith("| ")]
    assert {r.split("|")[1].strip() for r in rows} >= {"SGD", "FedAvg", "FedReg"}


def test_privacy_preset_fills_table4_from_each_seeds_study(ci):
    out = ci("fedreg-table4")
    text = (out / "report.md").read_text()
    study = out / "table-4" / "privacy-study" / "seed0"
    result = json.loads((study / "privacy.json").read_text())
    for row, (run, attack) in table_rows(result).items():
        cells = next(line for line in text.splitlines() if line.startswith(f"| {row} |"))
        cells = [c.strip() for c in cells.strip("|").split("|")]
        psnr, sigma, final = cells[1], cells[3], cells[-2]
        assert psnr == f"{result['attacks'][attack]['psnr']:.2f}"
        assert sigma == (f"{result['sigma_matched']:.3g}" if "dpsgd" in run else "-")
        assert final == f"{result['runs'][run]['final_accuracy']:.4f}"
    assert "fedretain privacy dataset=" in text and f"--out {study}" in text


@pytest.mark.parametrize("scale", SCALES)
def test_every_preset_gives_valid_configs_at_every_scale(scale):
    for name, entry in PRESETS.items():
        if scale not in entry.meta["seeds"]:  # medium: only where a preset defines it
            assert scale == "medium", name
            continue
        paper = entry.meta["dataset"]
        plan = entry.factory(scale, [0, 1], Data(paper, "", paper))
        assert plan.runs and plan.claims, name
        assert len({(r.setting, r.method, r.seed) for r in plan.runs}) == len(plan.runs)
        assert len({r.folder for r in plan.runs}) == len(plan.runs)
        for spec in plan.runs:
            load_config(None, as_args({**plan.base, **spec.overrides, "name": spec.method}))
        for setting, _ in plan.paper:
            assert setting in plan.settings(), (name, setting)
        for setting in plan.settings():
            if any(m.startswith("R_") for m in plan.metrics_of(setting)):
                assert plan.reference in plan.methods(setting), (name, setting)

        class Nothing:
            def get(self, setting: str, method: str, metric: str) -> None:
                return None

        assert all(c.check(Nothing()) is None for c in plan.claims)  # undecided, no error


def test_finished_runs_are_skipped_and_interrupted_ones_continue(ci):
    out = ci("fedcurv-table1")
    summaries = sorted(out.glob("**/summary.json"))
    stamps = [p.stat().st_mtime_ns for p in summaries]
    lines: list[str] = []
    ci("fedcurv-table1", echo=lines.append)
    assert f"{len(summaries)} run(s) already finished: skipped" in lines
    assert [p.stat().st_mtime_ns for p in summaries] == stamps

    # a run killed after its round-1 checkpoint continues from it, to the same numbers
    run = out / "e-10" / "fedcurv-lambda-0.01" / "seed0"
    before = [
        {k: v for k, v in r.items() if k != "seconds"} for r in read_jsonl(run / "metrics.jsonl")
    ]
    cfg = load_config(run / "config.toml", ["rounds=1"])
    shutil.rmtree(run)
    run_experiment(cfg, run, progress=False)
    (run / "summary.json").unlink()
    lines.clear()
    ci("fedcurv-table1", echo=lines.append)
    assert any("λ=0.01 seed 0: continued" in line for line in lines), lines
    after = [
        {k: v for k, v in r.items() if k != "seconds"} for r in read_jsonl(run / "metrics.jsonl")
    ]
    assert after == before and json.loads((run / "summary.json").read_text())["rounds"] == 2


def test_other_settings_in_the_same_folder_are_refused(ci):
    out = ci("gradma-table2")
    with pytest.raises(ConfigError, match=r"holds a run with other settings \(lr\)"):
        reproduce(["gradma-table2"], out, scale="ci", extra=["lr=0.2"], echo=lambda s: None)


def table(text: str, column: str) -> dict[str, float]:
    """A column of the report's first table: method -> value."""
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    head = [c.strip() for c in rows[0].strip("|").split("|")]
    i = head.index(column)
    out = {}
    for line in rows[1:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0] == "#":  # the claims table
            break
        out[cells[0]] = float(cells[i])
    return out


def test_demo_paragraph_matches_its_table(ci):
    text = (ci("demo") / "report.md").read_text()
    final, forgetting = table(text, "final acc"), table(text, "loss increase")
    paragraph = text.split("## Summary")[1].split("\n\n")[1]
    leader = re.search(r"\*\*([^*]+)\*\* led with a final accuracy of ([0-9.]+)", paragraph)
    assert leader and leader[1] == max(final, key=final.get)
    assert float(leader[2]) == pytest.approx(final[leader[1]], abs=1e-4)
    least = re.search(r"\*\*([^*]+)\*\* forgot least", paragraph)
    assert least and least[1] == min(forgetting, key=forgetting.get)
    gap = re.search(r"([-0-9.]+) points above FedAvg's", paragraph)
    if leader[1] != "FedAvg":
        assert gap and float(gap[1]) == pytest.approx(
            100 * (final[leader[1]] - final["FedAvg"]), abs=0.02
        )
    for plot in ("accuracy-", "accuracy_vs_bytes-", "forgetting-"):
        assert f"]({plot}" in text


class Fixed:
    """Values of one setting from a table: method -> metric -> value."""

    def __init__(self, rows: dict[str, dict[str, float]]) -> None:
        self.rows = rows

    def get(self, setting: str, method: str, metric: str) -> float | None:
        return self.rows.get(method, {}).get(metric)


def test_demo_paragraph_names_the_leader_the_gain_the_cost_and_the_least_forgetting():
    from fedretain.experiments.presets import demo_paragraph

    plan = PRESETS.get("demo").factory("ci", [0], Data("fashion-mnist", "", "fashion-mnist"))
    rows = {
        "FedAvg": {
            "final": 0.70,
            "top": 0.72,
            "MB_up": 10.0,
            "MB_down": 10.0,
            "loss_increase": 0.5,
        },
        "FedReg": {
            "final": 0.75,
            "top": 0.76,
            "MB_up": 10.0,
            "MB_down": 10.0,
            "loss_increase": 0.2,
        },
        "FedCurv": {
            "final": 0.78,
            "top": 0.78,
            "MB_up": 30.0,
            "MB_down": 30.0,
            "loss_increase": 0.4,
        },
        "SGD": {"final": 0.60, "top": 0.60, "MB_up": 10.0, "MB_down": 10.0, "loss_increase": 0.9},
    }
    values: Values = Fixed(rows)
    text = demo_paragraph(values, plan)
    assert text.startswith("**FedCurv** led with a final accuracy of 0.7800 (top 0.7800)")
    assert "8.00 points above FedAvg's 0.7000" in text and "at 3.00x FedAvg's communication" in text
    assert "**FedReg** forgot least" in text and "SGD forgot most" in text
    assert "Next came FedReg (0.7500); last was SGD (0.6000)" in text
    assert "FedCurv sent the most, 3.00x FedAvg's bytes" in text


def test_cifar_presets_without_files_say_what_is_missing(tmp_path):
    reproduce(["fedreg-table2"], tmp_path / "t2", scale="ci", echo=lambda s: None)
    text = (tmp_path / "t2" / "report.md").read_text()
    assert "Not run: the data are missing" in text and "cifar-10-batches-py" in text
    assert "--data-dir FOLDER" in text and "not run (data missing)" in text
    assert not list((tmp_path / "t2").glob("**/summary.json"))


@pytest.mark.skipif(not FMNIST, reason="apt-get install dataset-fashion-mnist")
def test_parallel_jobs_report_a_failed_run_and_finish_the_others(tmp_path, capsys):
    out = tmp_path / "par"
    broken = out / "e-10" / "fedavg" / "seed0" / "checkpoint"
    broken.mkdir(parents=True)
    (broken / "meta.json").write_text("{")  # a corrupt checkpoint: that run fails
    code = main(["reproduce", "fedcurv-table1", "--out", str(out), "--scale", "ci", "--jobs", "2"])
    assert code == 0
    text = (out / "report.md").read_text()
    assert "## Runs that failed" in text and "e-10/fedavg/seed0" in text
    assert "Runs: 9 of 10 finished" in text
    assert "1 run(s) failed" in capsys.readouterr().out


def test_list_and_bad_names(capsys, tmp_path):
    assert main(["reproduce", "--list"]) == 0
    listed = capsys.readouterr().out
    for name in PRESETS:
        assert name in listed
    assert main(["reproduce", "fedreg-tabel1", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "unknown preset 'fedreg-tabel1'" in err
    assert "did you mean 'fedreg-table1'" in err and "demo" in err and "tce-table1" in err
    assert main(["reproduce", "demo", "--out", str(tmp_path), "--scale", "huge"]) == 2
    assert "unknown scale 'huge'" in capsys.readouterr().err
    assert main(["reproduce", "demo", "--out", str(tmp_path), "--scale", "medium"]) == 2
    assert "preset demo has no scale 'medium'; it has: ci, small, paper" in capsys.readouterr().err
    assert main(["reproduce", "--out", str(tmp_path)]) == 2
    assert "--list" in capsys.readouterr().err


def test_all_means_every_preset_that_has_the_scale():
    assert preset_names(["all"], "small") == list(PRESETS)
    assert preset_names(["all"], "medium") == ["fedcil-table1"]
    assert preset_names(["demo", "demo", "tce-table1"], "ci") == ["demo", "tce-table1"]
    with pytest.raises(ConfigError, match="unknown preset 'nope'"):
        preset_names(["nope"], "small")
    with pytest.raises(ConfigError, match="preset demo has no scale 'medium'; it has: ci, small"):
        preset_names(["demo"], "medium")


def test_fedcil_medium_scale_runs_the_claims_three_methods_with_their_generators_measured():
    plan = PRESETS.get("fedcil-table1").factory("medium", [0], Data("mnist", "", "mnist"))
    assert plan.methods(plan.settings()[0]) == ["FedAvg", "FedAvg+ACGAN", "FedCIL"]
    small = PRESETS.get("fedcil-table1").factory("small", [0], Data("mnist", "", "mnist"))
    for spec in plan.runs:
        cfg = load_config(None, as_args({**plan.base, **spec.overrides, "name": spec.method}))
        assert cfg.rounds == 25 and cfg.local_steps == 80  # 4.4x small's local training
        assert ("generator_quality" in cfg.diagnostics) == (spec.method != "FedAvg")
    assert len(small.runs) == 7 and "scale=medium" in " ".join(plan.reasons)
