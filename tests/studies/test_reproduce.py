"""`fedretain reproduce`: the presets of no paper's own file at scale=ci (the others:
test_ci_<paper>.py), resumability, the report's claims and the demo's generated paragraph."""

from __future__ import annotations

import json
import shutil

import pytest

from fedretain.cli import main
from fedretain.errors import ConfigError
from fedretain.experiments.run import run_experiment
from fedretain.files import read_jsonl
from fedretain.recipe.config import load_config
from fedretain.studies.presets import PRESETS, SCALES, Data
from fedretain.studies.reproduce import as_args, preset_names, reproduce
from tests.data.test_data_cifar import write_cifar10
from tests.studies.presets_at_ci import FMNIST, PAPERS, check_at_ci, ci, presets_of

__all__ = ["ci"]  # the module's fixture


@pytest.mark.parametrize("name", presets_of(None))
def test_every_other_preset_runs_at_ci_and_reports_every_claim(ci, name):
    check_at_ci(ci, name)


def test_every_preset_runs_at_ci_in_one_file():
    papers = [p for paper in PAPERS for p in presets_of(paper)] + presets_of(None)
    names = [p if isinstance(p, str) else p.values[0] for p in papers]
    assert sorted(names) == sorted(PRESETS) and len(set(names)) == len(names)


@pytest.mark.parametrize("scale", SCALES)
def test_every_preset_gives_valid_configs_at_every_scale(scale):
    for name, entry in PRESETS.items():
        if scale not in entry.meta["seeds"]:  # medium: only where a preset defines it
            assert scale == "medium", name
            continue
        paper = entry.meta["dataset"]
        plan = entry.factory(scale, [0, 1], Data(paper, "", paper))
        assert plan.runs, name
        assert plan.claims or name.endswith("-tune"), name  # a tuning study makes no claim
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


def test_demo_report_at_ci_ranks_nothing_and_shows_every_plot(ci):
    """One seed of two rounds: no method separates from another (the paragraph's ranking
    on hand-made numbers is tests/studies/test_demo.py's)."""
    text = (ci("demo") / "report.md").read_text()
    paragraph = text.split("## Summary")[1].split("\n\n")[1]
    assert "No method learned beyond chance" in paragraph or "within noise" in paragraph
    assert " led" not in paragraph and "Then came" not in paragraph
    for plot in ("accuracy-", "accuracy_vs_bytes-", "forgetting-"):
        assert f"]({plot}" in text


def test_cifar_presets_without_files_say_what_is_missing(tmp_path):
    reproduce(["fedreg-table2"], tmp_path / "t2", scale="ci", echo=lambda s: None)
    text = (tmp_path / "t2" / "report.md").read_text()
    assert "Not run: the data are missing" in text and "cifar-10-batches-py" in text
    assert "--data-dir FOLDER" in text and "not run (data missing)" in text
    assert not list((tmp_path / "t2").glob("**/summary.json"))


@pytest.mark.skipif(not FMNIST, reason="apt-get install dataset-fashion-mnist")
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


def test_fedcil_medium_scale_runs_the_replay_baselines_with_their_acgans_measured():
    plan = PRESETS.get("fedcil-table1").factory("medium", [0], Data("mnist", "", "mnist"))
    assert plan.methods(plan.settings()[0]) == [
        "FedAvg",
        "FedAvg+ACGAN",
        "FedProx+ACGAN",
        "FedAvg+DGR",
        "FedCIL",
    ]
    small = PRESETS.get("fedcil-table1").factory("small", [0], Data("mnist", "", "mnist"))
    for spec in plan.runs:
        cfg = load_config(None, as_args({**plan.base, **spec.overrides, "name": spec.method}))
        assert cfg.rounds == 25 and cfg.local_steps == 80  # 4.4x small's local training
        assert ("generator_quality" in cfg.diagnostics) == (
            "ACGAN" in spec.method or spec.method == "FedCIL"
        )
    assert len(small.runs) == 14 and "scale=medium" in " ".join(plan.reasons)


def test_a_diverged_run_is_listed_by_every_later_invocation_and_is_no_result(ci, tmp_path, capsys):
    out = tmp_path / "demo"
    shutil.copytree(ci("demo"), out)
    run = out / "fashion-mnist-two-classes-per-client" / "fedreg" / "seed0"
    summary = json.loads((run / "summary.json").read_text())
    stopped = "training diverged in round 2: NaN or Inf in the global model after aggregation"
    (run / "summary.json").write_text(json.dumps({**summary, "rounds": 1, "stopped": stopped}))
    for _ in range(2):  # the run is not redone, and each invocation lists it
        assert main(["reproduce", "demo", "--out", str(out), "--scale", "ci"]) == 1
        captured = capsys.readouterr()
        assert "9 run(s) already finished: skipped" in captured.out
        assert captured.err.count("\n") == 1
        assert "0 run(s) failed and 1 diverged" in captured.err and "report.md" in captured.err
        text = (out / "report.md").read_text()
        assert "Runs: 8 of 9 finished, 1 diverged, 0 failed, 0 not run" in text
        failures = text.split("## Runs that failed or diverged")[1].split("##")[0]
        assert f"`{run}`: diverged in round 2: {stopped}" in failures
        fedreg = next(line for line in text.splitlines() if line.startswith("| FedReg |"))
        assert fedreg.count("diverged in round 2") == len(fedreg.split("|")) - 3  # every metric
        claim = next(line for line in text.splitlines() if "FedReg forgets less" in line)
        assert "**undecided**" in claim and "no result from FedReg diverged in round 2" in claim
        assert "FedReg seed 0: diverged in round 2" in text  # the plots draw it to its end


def test_the_report_names_the_cpu_the_runs_ran_on(ci):
    from fedretain.studies.reproduce import cpu_text, machine

    out = ci("demo")
    here = machine()
    assert here["cpu"] and here["avx512"] in (True, False, None)
    status = json.loads(next(out.glob("**/seed0/status.json")).read_text())
    assert status["state"] == "finished" and status["cpu"] == here["cpu"]
    text = (out / "report.md").read_text()
    assert f"Machine: the runs ran on {cpu_text(here)}." in text
    assert "float32 results vary across CPUs" in text and "without AVX-512" in text


def test_report_only_runs_nothing_and_rewrites_the_report_byte_identically(
    ci, tmp_path, monkeypatch
):
    out = ci("demo")
    copy = tmp_path / "results" / "demo"
    shutil.copytree(out, copy)
    for name in ("report.md", "claims.json"):
        (copy / name).unlink()
    for checkpoint in copy.glob("**/checkpoint"):  # what a committed report ships: no state
        shutil.rmtree(checkpoint)
    monkeypatch.chdir(tmp_path)
    runs = {p: p.stat().st_mtime_ns for p in copy.glob("**/metrics.jsonl")}
    assert (
        main(["reproduce", "demo", "--out", "results/demo", "--scale", "ci", "--report-only"]) == 0
    )
    assert {p: p.stat().st_mtime_ns for p in copy.glob("**/metrics.jsonl")} == runs  # no run
    first = (copy / "report.md").read_text()
    assert (
        main(["reproduce", "demo", "--out", "results/demo", "--scale", "ci", "--report-only"]) == 0
    )
    assert (copy / "report.md").read_text() == first  # from the same results, the same bytes
    assert json.loads((copy / "claims.json").read_text())["preset"] == "demo"
    # an unfinished run is reported as not run, never started
    shutil.rmtree(copy / "fashion-mnist-two-classes-per-client" / "fedavg" / "seed0")
    assert (
        main(["reproduce", "demo", "--out", "results/demo", "--scale", "ci", "--report-only"]) == 0
    )
    assert not (copy / "fashion-mnist-two-classes-per-client" / "fedavg" / "seed0").exists()
    assert (
        "Runs: 8 of 9 finished, 0 diverged, 0 failed, 1 not run" in (copy / "report.md").read_text()
    )


def test_the_ledger_lists_every_claim_of_every_report_with_counts_per_paper(ci, tmp_path):
    from fedretain.studies.reproduce.ledger import ledger

    for name in ("demo", "fedcurv-table1"):
        shutil.copytree(ci(name), tmp_path / "results" / name)
    page = ledger(tmp_path / "results")
    records = [
        json.loads((tmp_path / "results" / n / "claims.json").read_text())
        for n in ("demo", "fedcurv-table1")
    ]
    claims = [c for r in records for c in r["claims"]]
    assert all(c["claim"] in page for c in claims)
    counts = page.split("## Counts per paper")[1].split("##")[0]
    total = next(line for line in counts.splitlines() if line.startswith("| all |"))
    assert total.startswith(f"| all | {len(claims)} |")
    # the demo's claims count under the papers they come from
    assert (
        "| FedReg (Xu et al., ICLR 2022) | 1 |" in counts
        and "| TCE (Legate et al., 2023) | 1 |" in counts
    )
    assert "`results/demo/report.md`" in page and "Not counted here" not in page
    # a report written before the rule (no claims.json) is named as not counted, never read
    (tmp_path / "results" / "old").mkdir()
    (tmp_path / "results" / "old" / "report.md").write_text("# An old report: held\n")
    page = ledger(tmp_path / "results")
    assert "Not counted here: `results/old/report.md`" in page
    assert page.count("| all |") == 1 and total in page  # the counts are unchanged
    assert main(["ledger", str(tmp_path / "results"), "--out", str(tmp_path / "claims.md")]) == 0
    assert (tmp_path / "claims.md").read_text() == page


def test_a_second_datasets_runs_read_its_data_dir_and_are_not_run_without_it(tmp_path):
    from fedretain.studies.reproduce import plan_section
    from tests.data.test_datasets import write_mnist_like

    write_mnist_like(tmp_path / "mnist")  # gradma-fig6 on MNIST's own files: its CIFAR-10 panel
    write_cifar10(tmp_path / "cifar", per_batch=4)  # reads a second dataset

    def states(dirs: list[str]) -> dict[str, set[str]]:
        section = plan_section("gradma-fig6", tmp_path / "o", "small", 1, dirs, [], tmp_path, False)
        out: dict[str, set[str]] = {}
        for job in section.jobs:
            data_dir = next((a for a in job.args if a.startswith("data_dir=")), "")
            out.setdefault(job.spec.setting, set()).add(f"{job.state} {data_dir}")
        return out

    alone = states([f"mnist={tmp_path / 'mnist'}"])
    assert alone["CIFAR-10 ω=1.0"] == {"missing data_dir="}  # not run, said so: no failure
    assert alone["MNIST ω=0.1"] == {f"fresh data_dir={tmp_path / 'mnist'}"}
    both = states([f"mnist={tmp_path / 'mnist'}", f"cifar10={tmp_path / 'cifar'}"])
    assert both["CIFAR-10 ω=1.0"] == {f"fresh data_dir={tmp_path / 'cifar'}"}
