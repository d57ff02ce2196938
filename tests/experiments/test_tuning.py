"""The tuning study (fedretain.experiments.tuning, `fedretain reproduce demo-tune`): equal
budgets, the choice read from the validation split and never from the test set."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from fedretain.core.task import Task
from fedretain.errors import ConfigError
from fedretain.experiments.presets import PRESETS, Data
from fedretain.experiments.presets import demo as presets  # DEMO_GRIDS, patched below
from fedretain.experiments.reproduce import as_args, reproduce
from fedretain.experiments.tuning import (
    Grid,
    check_budgets,
    choose,
    validation_accuracy,
)
from fedretain.files import read_json, write_json
from fedretain.recipe.config import load_config
from fedretain.recipe.federation import build_federation

FMNIST = Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz").exists()
DATA = Data("fashion-mnist", "", "fashion-mnist")
GRIDS = {"FedAdam": ("server_opt.lr", (0.01, 0.2)), "FedProx": ("algo.mu", (0.0, 1.0))}


def test_every_method_gets_the_same_budget_and_only_its_key_differs():
    plan = PRESETS.get("demo-tune").factory("small", [0, 1], DATA)
    budget = ("rounds", "clients", "clients_per_round", "local_epochs", "local_steps")
    budget += ("batch_size", "val_fraction", "model", "eval_every")
    by_method: dict[str, list] = {}
    for spec in plan.runs:
        cfg = load_config(None, as_args({**plan.base, **spec.overrides}))
        by_method.setdefault(spec.series, []).append(
            (spec.x, cfg.seed, tuple(getattr(cfg, k) for k in budget))
        )
    assert set(by_method) == set(presets.DEMO_GRIDS)
    shapes = {m: (len(runs), {r[2] for r in runs}) for m, runs in by_method.items()}
    assert len({(n, frozenset(b)) for n, b in shapes.values()}) == 1  # same runs, same budget
    for runs in by_method.values():
        points = {x for x, _, _ in runs}
        assert len(points) == 3 and {s for _, s, _ in runs} == {0, 1}
        assert len(runs) == len(points) * 2  # every point on every seed
    assert plan.base["val_fraction"] > 0


def test_grids_of_different_sizes_or_a_budget_key_are_refused():
    fedadam = Grid("FedAdam", {"algorithm": "fedavg"}, "server_opt.lr", (0.01, 0.1))
    with pytest.raises(ConfigError, match=r"grids differ in size.*FedProx 3"):
        check_budgets([fedadam, Grid("FedProx", {"algorithm": "fedprox"}, "algo.mu", (0, 1, 2))])
    with pytest.raises(ConfigError, match="sets rounds, the budget every point shares"):
        check_budgets([Grid("FedAvg", {"algorithm": "fedavg"}, "rounds", (10, 20))])
    # the local learning rate is the setting's, shared: no method tunes it for itself
    with pytest.raises(ConfigError, match="sets lr, the budget every point shares"):
        check_budgets([Grid("FedAvg", {"algorithm": "fedavg"}, "lr", (0.01, 0.1))])


def test_choose_takes_the_best_mean_over_the_seeds_first_on_a_tie_and_only_complete_points():
    scores = {
        "A": {0.1: [0.5, 0.7], 0.2: [0.65, 0.6], 0.3: [0.9]},  # 0.3 lacks a seed
        "B": {1.0: [0.4], 2.0: [0.4]},
        "C": {1.0: [], 2.0: []},
    }
    assert choose(scores) == {"A": 0.2, "B": 1.0, "C": None}


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`reproduce demo-tune` at ci on two methods of two points each."""
    out = tmp_path_factory.mktemp("tune")
    tune_at_ci(out)
    return out


def tune_at_ci(out: Path) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(presets, "DEMO_GRIDS", GRIDS)
        reproduce(["demo-tune"], out, scale="ci", echo=lambda s: None)


def folders(out: Path) -> dict[str, Path]:
    """Run label -> its folder (seed 0)."""
    found = {}
    for summary in out.glob("**/seed0/summary.json"):
        found[read_json(summary)["name"]] = summary.parent
    return found


@pytest.mark.skipif(not FMNIST, reason="apt-get install dataset-fashion-mnist")
def test_validation_accuracy_evaluates_the_held_out_split_not_the_test_set(study, monkeypatch):
    folder = folders(study)["FedAdam server_opt.lr=0.2"]
    (folder / "validation.json").unlink()
    seen: list[torch.Tensor] = []
    evaluate = Task.evaluate

    def spy(self, params, buffers, x, y, batch_size=1000):
        seen.append(x)
        return evaluate(self, params, buffers, x, y, batch_size)

    monkeypatch.setattr(Task, "evaluate", spy)
    acc = validation_accuracy(folder)
    fed = build_federation(load_config(folder / "config.toml"))
    held_out = np.concatenate(fed.val_parts)
    assert len(seen) == 1 and len(seen[0]) == len(held_out) != len(fed.dataset.x_test)
    assert torch.equal(seen[0], fed.dataset.x_train[torch.from_numpy(held_out)])
    assert read_json(folder / "validation.json")["accuracy"] == acc
    assert set(held_out).isdisjoint(np.concatenate(fed.parts))  # never trained on


@pytest.mark.skipif(not FMNIST, reason="apt-get install dataset-fashion-mnist")
def test_the_study_picks_the_best_validation_point_even_where_the_test_set_disagrees(study):
    runs = folders(study)
    assert set(runs) == {
        "FedAdam server_opt.lr=0.01",
        "FedAdam server_opt.lr=0.2",
        "FedProx algo.mu=0",
        "FedProx algo.mu=1",
    }
    test = {name: read_json(f / "summary.json")["final_accuracy"] for name, f in runs.items()}
    wanted = {}
    for method in GRIDS:  # validation scores ranked against the test set's
        mine = sorted((n for n in runs if n.startswith(method + " ")), key=test.get)
        for rank, name in enumerate(mine):  # the test set's worst gets the best validation
            rounds = read_json(runs[name] / "summary.json")["rounds"]
            write_json(
                runs[name] / "validation.json", {"round": rounds, "accuracy": 0.9 - rank / 10}
            )
        if test[mine[0]] != test[mine[-1]]:
            wanted[mine[0]], wanted[mine[-1]] = True, False
    assert wanted  # at least one method whose points the test set tells apart
    tune_at_ci(study)  # the runs are done: only the report again
    text = (study / "report.md").read_text()
    chosen = text.split("Chosen: ")[1].split("\n")[0].rstrip(".").split("; ")
    for name, picked in wanted.items():
        assert (name in chosen) is picked, (name, chosen)
    assert "0.9000 (0.9000)" in text and "The test set plays no part" in text
