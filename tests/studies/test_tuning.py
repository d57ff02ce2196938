"""Tuning (fedretain.studies.tuning, `fedretain reproduce demo-tune`, `fedcurv-tune`):
the same learning rates and budget for every method, a tuning seed no evaluation uses, the
choice read from the validation split and never from the test set, edges flagged."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fedretain.errors import ConfigError
from fedretain.files import read_json, read_jsonl, write_jsonl
from fedretain.recipe.config import load_config
from fedretain.recipe.federation import build_federation
from fedretain.studies.presets import PRESETS, Data
from fedretain.studies.presets import demo as presets  # DEMO_GRIDS, patched below
from fedretain.studies.reproduce import as_args, reproduce
from fedretain.studies.tuning import (
    TUNED_FILE,
    TUNING_SEED,
    Criterion,
    Grid,
    check_budgets,
    choose,
    tuned,
)

FMNIST = Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz").exists()
DATA = Data("fashion-mnist", "", "fashion-mnist")
ROOT = Path(__file__).parents[2]


def test_every_method_gets_the_same_budget_and_learning_rates():
    plan = PRESETS.get("demo-tune").factory("small", [0], DATA)
    budget = ("rounds", "clients", "clients_per_round", "local_epochs", "local_steps")
    budget += ("batch_size", "val_fraction", "model", "eval_every", "seed")
    seen = set()
    lrs: dict[str, set[float]] = {}
    for spec in plan.runs:
        cfg = load_config(None, as_args({**plan.base, **spec.overrides}))
        seen.add(tuple(getattr(cfg, k) for k in budget))
        lrs.setdefault(spec.series, set()).add(cfg.lr)
    assert len(seen) == 1  # one budget, one seed: the tuning seed
    assert cfg.seed == TUNING_SEED and cfg.val_fraction > 0 and cfg.eval_every == 1
    assert all(v == set(presets.DEMO_LRS) for v in lrs.values()) and len(lrs) == 9


def test_grids_of_different_sizes_learning_rates_or_a_budget_key_are_refused():
    lr = {"lr": (0.01, 0.1)}
    fedadam = Grid("FedAdam", {"algorithm": "fedavg"}, {**lr, "server_opt.lr": (0.01, 0.1)})
    fedprox = Grid("FedProx", {"algorithm": "fedprox"}, {**lr, "algo.mu": (0, 1, 2)})
    with pytest.raises(ConfigError, match=r"grids differ in size.*FedProx 3"):
        check_budgets([fedadam, fedprox])
    other = Grid("FedAvg", {"algorithm": "fedavg"}, {"lr": (0.03, 0.3)})
    with pytest.raises(ConfigError, match="differ in their learning rates"):
        check_budgets([fedadam, other])
    with pytest.raises(ConfigError, match="sets rounds, the budget every point shares"):
        check_budgets([Grid("FedAvg", {"algorithm": "fedavg"}, {"rounds": (10, 20)})])


def test_a_grid_is_the_product_of_its_keys_and_flags_edges_but_not_a_keys_bounds():
    g = Grid("FedReg", {}, {"lr": (0.1, 1.0), "algo.gamma": (0.5, 1.0)}, {"algo.gamma": (0, 1)})
    assert g.points() == [
        {"lr": 0.1, "algo.gamma": 0.5},
        {"lr": 0.1, "algo.gamma": 1.0},
        {"lr": 1.0, "algo.gamma": 0.5},
        {"lr": 1.0, "algo.gamma": 1.0},
    ]
    assert g.edge({"lr": 1.0, "algo.gamma": 1.0}) == ["lr"]  # γ = 1 is as far as γ goes
    assert g.edge({"lr": 0.1, "algo.gamma": 0.5}) == ["lr", "algo.gamma"]


def test_choose_takes_the_best_mean_over_the_seeds_first_on_a_tie_and_only_complete_points():
    p = [{"x": 0.1}, {"x": 0.2}, {"x": 0.3}]
    scores = {
        "A": [(p[0], [0.5, 0.7]), (p[1], [0.65, 0.6]), (p[2], [0.9])],  # 0.3 lacks a seed
        "B": [(p[0], [0.4]), (p[1], [0.4])],
        "C": [(p[0], []), (p[1], [])],
    }
    assert choose(scores) == {"A": p[1], "B": p[0], "C": None}


def records(vals: list[float]) -> list[dict]:
    return [{"round": r, "val_accuracy": v} for r, v in enumerate(vals)]


def test_a_point_is_scored_by_its_last_evaluations_or_its_rounds_to_a_target():
    # 11 evaluations after round 0: the last 2 (10 %, rounded up) are averaged
    curve = records([0.1] + [0.5] * 9 + [0.6, 0.8])
    assert Criterion().score(curve) == pytest.approx(0.7)
    target = Criterion(target=0.55)
    assert target.score(curve) > target.score(records([0.1] * 11 + [0.6]))  # fewer rounds
    assert target.shown(target.score(curve)) == "10 rounds, final 0.7000"
    with pytest.raises(ConfigError, match="val_fraction > 0"):
        Criterion().score([{"round": 1, "test_accuracy": 0.5}])


@pytest.mark.parametrize("preset", ["demo", "fedcurv-table1", "forgetting-bench"])
def test_the_package_ships_the_committed_tuning_reports_choices(preset):
    source = {
        "demo": "demo-tune",
        "fedcurv-table1": "fedcurv-tune",
        "forgetting-bench": "forgetting-bench-tune",
    }[preset]
    committed = ROOT / "results" / source / "choices.json"
    if not committed.is_file():
        pytest.skip(f"results/{source} is not committed in this checkout")
    assert tuned(preset) == json.loads(committed.read_text())
    assert json.loads(TUNED_FILE.read_text())[preset]["seeds"] == [TUNING_SEED]


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`reproduce demo-tune` at ci on two methods of two learning rates and two points."""
    out = tmp_path_factory.mktemp("tune")
    tune_at_ci(out)
    return out


def tune_at_ci(out: Path) -> None:
    grids = {"FedAdam": ("server_opt.lr", (0.01, 0.2), (0.0, 1e9))}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(presets, "DEMO_GRIDS", grids)
        mp.setattr(presets, "DEMO_LRS", (0.05, 0.1))
        mp.setattr(
            presets, "DEMO_METHODS", {m: presets.DEMO_METHODS[m] for m in ("FedAvg", "FedAdam")}
        )
        reproduce(["demo-tune"], out, scale="ci", echo=lambda s: None)


def folders(out: Path) -> dict[str, Path]:
    """Run label -> its folder."""
    return {read_json(s)["name"]: s.parent for s in out.glob("**/seed100/summary.json")}


@pytest.mark.skipif(not FMNIST, reason="apt-get install dataset-fashion-mnist")
def test_each_evaluation_validates_on_the_held_out_split_never_trained_on(study):
    folder = folders(study)["FedAdam lr=0.1 server_opt.lr=0.2"]
    recs = read_jsonl(folder / "metrics.jsonl")
    assert all("val_accuracy" in r and "test_accuracy" in r for r in recs)
    fed = build_federation(load_config(folder / "config.toml"))
    held_out = np.concatenate(fed.val_parts)
    assert set(held_out).isdisjoint(np.concatenate(fed.parts))
    assert recs[-1]["val_accuracy"] != recs[-1]["test_accuracy"]


@pytest.mark.skipif(not FMNIST, reason="apt-get install dataset-fashion-mnist")
def test_the_study_picks_the_best_validation_point_even_where_the_test_set_disagrees(study):
    runs = folders(study)
    assert len(runs) == 2 + 4  # FedAvg: 2 learning rates; FedAdam: 2 x 2
    test = {n: read_json(f / "summary.json")["final_accuracy"] for n, f in runs.items()}
    fedadam = sorted((n for n in runs if n.startswith("FedAdam ")), key=test.get)
    for rank, name in enumerate(fedadam):  # the test set's worst gets the best validation
        recs = read_jsonl(runs[name] / "metrics.jsonl")
        write_jsonl(
            runs[name] / "metrics.jsonl",
            [{**r, "val_accuracy": 0.9 - rank / 10} for r in recs],
        )
    tune_at_ci(study)  # the runs are done: only the report again
    choices = read_json(study / "choices.json")["settings"][presets.DEMO_SETTING]
    worst = fedadam[0].split()[1:]
    assert [f"{k}={v:g}" for k, v in choices["FedAdam"]["chosen"].items()] == worst
    assert choices["FedAdam"]["edge"]  # every point of a 2 x 2 grid is at its edge
    text = (study / "report.md").read_text()
    assert "**0.9000 (0.9000)**" in text and "The test set plays no part" in text


def test_a_report_shows_each_settings_choice_and_puts_the_papers_numbers_on_the_chosen_row():
    from fedretain.studies.reproduce import Results
    from fedretain.studies.reproduce.report import paper_value, tuning_section

    plan = PRESETS.get("fedcurv-table1").factory("small", [0], DATA)
    lines = tuning_section(plan, Results(plan, {}))
    assert "| setting | method | grid | chosen | at a grid edge |" in lines
    chosen = {t.setting: t for t in plan.tuning if t.method == "FedCurv"}
    for setting, t in chosen.items():
        row = f"| {setting} | FedCurv | algo.lambda in {{"
        assert any(line.startswith(row) for line in lines)
        scores = next(line for line in lines if line.startswith(f"- {setting}, FedCurv: "))
        assert " rounds, final " in scores  # rounds to the target, not a raw score
        # the paper's number (at its tuned λ) sits on our chosen λ's row, on no other
        lam = t.chosen["algo.lambda"]
        rows = [s.method for s in plan.runs if s.setting == setting and s.series == "FedCurv"]
        metric = next(m for m in plan.metrics if m.startswith("to:"))
        shown = {m: paper_value(plan, Results(plan, {}), setting, m, metric) for m in rows}
        assert [m for m, v in shown.items() if v is not None] == [f"FedCurv λ={lam:g}"]
