"""Observers of a run: the worked example of docs/adding-components.md ("How to add an
observer") run as it stands, end to end and across a resume; the built-in observers' names."""

import json
import re
from pathlib import Path

import pytest
import torch

from fedretain.errors import ConfigError
from fedretain.experiments.checkpoint import load_checkpoint
from fedretain.experiments.observers import BaseObserver, Evaluation, Observer, WholeTestSet
from fedretain.experiments.run import Run, run_experiment
from fedretain.files import read_jsonl
from fedretain.recipe.config import make_config
from fedretain.registry import kind

DOC = Path(__file__).resolve().parents[2] / "docs" / "adding-components.md"

TINY = {
    "dataset": "digits",
    "model": "mlp",
    "model.hidden": [16],
    "clients": 4,
    "clients_per_round": 2,
    "batch_size": 20,
    "rounds": 4,
    "eval_every": 2,
    "lr": 0.1,
    "threads": 1,
}


def _example() -> str:
    """The Python block of the section "How to add an observer"."""
    section = DOC.read_text().split("## How to add an observer", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.fixture
def model_norm():
    """The documentation's example, registered for one test."""
    registry = kind("diagnostic")
    namespace: dict = {}
    exec(compile(_example(), str(DOC), "exec"), namespace)
    yield namespace["ModelNorm"]
    del registry.entries["model_norm"]


def _norm(run: Run) -> float:
    params, _ = run.fed.algorithm.global_model(run.server_state)
    return float(torch.sqrt(sum(torch.sum(p.double() ** 2) for p in params.values())))


def _strip(rows):
    return [{k: v for k, v in r.items() if k != "seconds"} for r in rows]


def test_the_documented_observer_adds_its_key_to_every_record(tmp_path, model_norm):
    cfg = make_config({**TINY, "diagnostics": ["model_norm"]})
    run = Run(cfg, tmp_path / "steps")
    assert isinstance(run.observers["model_norm"], model_norm)
    run.start()
    assert run.records[0]["model_norm"] == pytest.approx(_norm(run))
    for rnd in range(2):
        record = run.evaluate(run.round(rnd))
        assert record["model_norm"] == pytest.approx(_norm(run), rel=1e-12)

    summary = run_experiment(cfg, tmp_path / "whole", progress=False)
    rows = read_jsonl(tmp_path / "whole" / "metrics.jsonl")
    assert [r["round"] for r in rows] == [0, 2, 4]
    assert all(r["model_norm"] > 0 for r in rows)
    assert len({r["model_norm"] for r in rows}) == 3  # the model moves
    assert summary["final_model_norm"] == rows[-1]["model_norm"]
    on_disk = json.loads((tmp_path / "whole" / "summary.json").read_text())
    assert on_disk["final_model_norm"] == rows[-1]["model_norm"]


def test_the_documented_observer_resumes_exactly(tmp_path, model_norm):
    cfg = make_config({**TINY, "diagnostics": ["model_norm"], "checkpoint_every": 100})
    whole = run_experiment(cfg, tmp_path / "whole", progress=False)
    run = Run(cfg, tmp_path / "cut")
    run.start()
    for rnd in range(2):
        metrics = run.round(rnd)
        if run.due(run.done):
            run.evaluate(metrics)
    run.checkpoint()
    run.close()
    assert "model_norm" not in load_checkpoint(tmp_path / "cut").extra  # no state of its own
    cut = run_experiment(cfg, tmp_path / "cut", progress=False, resume=True)
    assert _strip(read_jsonl(tmp_path / "cut" / "metrics.jsonl")) == _strip(
        read_jsonl(tmp_path / "whole" / "metrics.jsonl")
    )
    assert cut["final_model_norm"] == whole["final_model_norm"]


def test_a_plain_run_has_only_the_observers_it_needs(tmp_path):
    run = Run(make_config(TINY), tmp_path)
    assert list(run.observers) == []
    assert isinstance(run.evaluation, WholeTestSet)
    run = Run(make_config({**TINY, "privacy": "client_fixed"}), tmp_path, progress=True)
    assert list(run.observers) == ["accountant", "progress"]
    observer: Observer = run.observers["accountant"]
    assert isinstance(observer, BaseObserver) and not isinstance(observer, Evaluation)


def test_test_samples_evaluates_the_same_subset_for_every_seed(tmp_path):
    runs = [Run(make_config({**TINY, "test_samples": 40, "seed": s}), tmp_path) for s in (0, 1)]
    tests = [r.fed.dataset.y_test for r in runs]
    assert len(tests[0]) == 40 and torch.equal(tests[0], tests[1])
    summary = run_experiment(make_config({**TINY, "test_samples": 40}), tmp_path / "run")
    assert summary["final_accuracy"] * 40 == pytest.approx(round(summary["final_accuracy"] * 40))
    with pytest.raises(ConfigError, match="test_samples"):
        make_config({**TINY, "test_samples": -1})


def test_plots_off_writes_the_results_without_a_png(tmp_path):
    cfg = {**TINY, "diagnostics": ["forgetting"], "diagnostics.samples": 4}
    summary = run_experiment(make_config({**cfg, "plots": False}), tmp_path / "off")
    assert summary["forgetting"] and (tmp_path / "off" / "summary.json").is_file()
    assert not list((tmp_path / "off").glob("*.png"))
    run_experiment(make_config(cfg), tmp_path / "on")  # the default draws them
    assert {p.name for p in (tmp_path / "on").glob("*.png")} >= {"accuracy.png", "forgetting.png"}


def test_an_observer_is_told_the_round_and_needs_no_run(tmp_path):
    """The forgetting diagnostic driven by hand with RoundResults of rounds run outside any
    Run writes what it writes inside one: everything it reads is in what it is told."""
    from fedretain.experiments.diagnostics import ForgettingObserver
    from fedretain.experiments.observers import RoundResult
    from fedretain.experiments.run import build_rounds

    cfg = make_config({**TINY, "rounds": 3, "diagnostics": ["forgetting"], "plots": False})
    run_experiment(cfg, tmp_path / "run", progress=False)
    fed, rounds = build_rounds(cfg)
    rounds.keep_local_models = True
    (tmp_path / "alone").mkdir()
    observer = ForgettingObserver(fed, tmp_path / "alone")
    observer.start(0, [])
    state = fed.algorithm.server_init(*fed.task.init())
    for rnd in range(cfg.rounds):
        clients, lr = fed.participation.clients(rnd), cfg.lr_at(rnd)
        after, metrics = rounds.run_round(state, rnd, lr, clients=clients)
        local = rounds.local_models
        observer.after_round(RoundResult(rnd, clients.tolist(), lr, metrics, state, after, local))
        state = after
    alone = read_jsonl(tmp_path / "alone" / "forgetting.jsonl")
    assert len(alone) == cfg.rounds
    assert alone == read_jsonl(tmp_path / "run" / "forgetting.jsonl")
