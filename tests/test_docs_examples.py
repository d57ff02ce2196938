"""The worked examples of docs/adding-components.md run as they stand: each section's module is
executed as the file it names, its registry line registers it (for one test), and a tiny run
selects it by name. An example that stops matching the code fails here, not in a reader's hands.
(The observer's example is run by tests/experiments/test_observers.py.)"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch

from fedretain.errors import ConfigError
from fedretain.experiments.run import Run, run_experiment
from fedretain.files import read_json, read_jsonl
from fedretain.recipe.config import make_config
from fedretain.registry import kind
from tests.continual.test_scenario import CI as CONTINUAL  # a 3-task class-incremental run

DOCS = Path(__file__).resolve().parents[1] / "docs"
DOC = DOCS / "adding-components.md"

TINY = {
    "dataset": "digits",
    "model": "mlp",
    "model.hidden": [16],
    "clients": 4,
    "clients_per_round": 2,
    "batch_size": 20,
    "rounds": 2,
    "eval_every": 1,
    "lr": 0.1,
    "threads": 1,
    "engine": "sequential",
}


def _rows(folder: Path) -> list[dict[str, Any]]:
    return [
        {k: v for k, v in r.items() if k != "seconds"} for r in read_jsonl(folder / "metrics.jsonl")
    ]


def blocks(section: str, doc: Path = DOC) -> list[str]:
    """The Python blocks of the section headed ``## <section>`` of ``doc``."""
    text = doc.read_text().split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", text, re.S)


@contextmanager
def example(section: str, kind_name: str, home: str) -> Iterator[dict[str, Any]]:
    """Run the section's blocks in the namespace of the module ``home`` names (where the
    docs say the code goes), the last block being the registry line; the entry it adds is
    removed afterwards."""
    registry = kind(kind_name)
    before = set(registry)
    namespace = dict(vars(importlib.import_module(home)))
    namespace["__name__"] = f"{home}_docs_example"
    for block in blocks(section):
        exec(compile(block, f"{DOC}:{section}", "exec"), namespace)
    added = set(registry) - before
    assert len(added) == 1, f"the section {section!r} registers {sorted(added)}"
    try:
        yield namespace
    finally:
        for name in added:
            del registry.entries[name]


def test_the_documented_algorithm_moves_the_model_eta_of_the_way(tmp_path):
    with example("An algorithm", "algorithm", "fedretain.algorithms"):
        half = run_experiment(
            make_config({**TINY, "algorithm": "fedavg-lr", "algo.eta": 0.5}), tmp_path / "half"
        )
        full = run_experiment(
            make_config({**TINY, "algorithm": "fedavg-lr", "algo.eta": 1.0}), tmp_path / "full"
        )
        fedavg = run_experiment(make_config({**TINY, "algorithm": "fedavg"}), tmp_path / "fedavg")
        with pytest.raises(ConfigError, match=r"algo\.eta must be > 0"):
            run_experiment(
                make_config({**TINY, "algorithm": "fedavg-lr", "algo.eta": 0.0}), tmp_path / "0"
            )
    # eta = 1 is FedAvg exactly; eta = 0.5 is another model
    assert read_jsonl(tmp_path / "full" / "metrics.jsonl")[-1]["test_loss"] == pytest.approx(
        read_jsonl(tmp_path / "fedavg" / "metrics.jsonl")[-1]["test_loss"], rel=1e-6
    )
    assert half["final_loss"] != full["final_loss"]
    assert fedavg["algorithm"] == "fedavg" and half["algorithm"] == "fedavg-lr"


def test_the_documented_engine_trains_as_the_sequential_one(tmp_path, capsys):
    with example("An engine", "engine", "fedretain.engines"):
        timed = run_experiment(
            make_config({**TINY, "engine": "timed", "engine.slow": 0.0}), tmp_path / "timed"
        )
    plain = run_experiment(make_config(TINY), tmp_path / "plain")
    assert timed["engine"] == "timed"
    # the same numbers as the sequential engine
    assert _rows(tmp_path / "timed") == _rows(tmp_path / "plain")
    assert timed["final_accuracy"] == plain["final_accuracy"]
    assert "round 1: client" in capsys.readouterr().err  # slow=0 reports every client


def test_the_documented_store_keeps_states_on_the_host(tmp_path):
    cfg = {**TINY, "algorithm": "scaffold", "clients_per_round": 4}
    with example("A client store", "store", "fedretain.engines.store") as namespace:
        run_experiment(make_config({**cfg, "store": "host"}), tmp_path / "host")
        store = namespace["host"]()
        store.device = torch.device("cpu")
        store.put(3, {"c": {"w": torch.ones(2)}})
        assert 3 in store and len(store) == 1 and store.ids() == [3]
        assert store.nbytes() == 8
    run_experiment(make_config(cfg), tmp_path / "memory")
    assert _rows(tmp_path / "host") == _rows(tmp_path / "memory")
    assert read_json(tmp_path / "host" / "summary.json")["clients_with_state"] == 4


def test_the_documented_preset_plans_a_run_per_method_and_seed():
    from fedretain.studies.presets import PRESETS, Data

    namespace: dict[str, Any] = {"__name__": "my_paper"}
    (block,) = blocks("Adding a preset", DOCS / "reproduce.md")
    exec(compile(block, str(DOCS / "reproduce.md"), "exec"), namespace)
    try:
        entry = PRESETS.get("my-table")
        plan = entry.factory("ci", [0, 1], Data("fashion-mnist", "", "mnist"))
    finally:
        del PRESETS.entries["my-table"]
    assert [(r.method, r.seed) for r in plan.runs] == [
        ("FedAvg", 0),
        ("FedAvg", 1),
        ("FedReg", 0),
        ("FedReg", 1),
    ]
    assert plan.runs[1].overrides == {"algorithm": "fedavg", "seed": 1}
    assert plan.base["rounds"] == 2 and entry.meta["standin"] == "fashion-mnist"
    values = {"FedAvg": 0.5, "FedReg": 0.6}
    assert plan.claims[0].check(_Means(values)) is True
    assert plan.claims[0].check(_Means({"FedAvg": 0.6, "FedReg": 0.5})) is False


class _Means:
    """Final accuracies of one setting, as a claim's check reads them."""

    def __init__(self, final: dict[str, float]) -> None:
        self.final = final

    def get(self, setting: str, method: str, metric: str) -> float | None:
        return self.final.get(method) if metric == "final" else None


def test_the_documented_continual_method_slows_only_the_first_rounds_of_later_tasks(tmp_path):
    with example("A continual method", "algorithm", "fedretain.continual"):
        same = run_experiment(
            make_config({**CONTINUAL, "algorithm": "fedavg-warmup", "algo.factor": 1.0}),
            tmp_path / "same",
        )
        slow = run_experiment(
            make_config({**CONTINUAL, "algorithm": "fedavg-warmup", "algo.factor": 0.01}),
            tmp_path / "slow",
        )
        with pytest.raises(ConfigError, match="scenario"):
            run_experiment(make_config({**TINY, "algorithm": "fedavg-warmup"}), tmp_path / "x")
    run_experiment(make_config({**CONTINUAL, "algorithm": "fedavg"}), tmp_path / "fedavg")
    fedavg, warm = _rows(tmp_path / "fedavg"), _rows(tmp_path / "slow")
    assert _rows(tmp_path / "same") == fedavg  # factor 1 is FedAvg
    assert warm[:3] == fedavg[:3]  # rounds 0-2: task 0 and its end, no warm-up
    assert warm[3]["test_loss"] != fedavg[3]["test_loss"]  # round 3: task 1's first round
    assert same["algorithm"] == slow["algorithm"] == "fedavg-warmup"


def test_the_documented_replay_rehearses_the_last_task_from_the_second_task_on(tmp_path):
    with example("A replay", "replay", "fedretain.continual.replay"):
        run_experiment(
            make_config({**CONTINUAL, "replay": "exemplars", "replay.size": 4}), tmp_path / "replay"
        )
        run = Run(
            make_config({**CONTINUAL, "replay": "exemplars", "replay.size": 4}), tmp_path / "r"
        )
        run.start()
        for rnd in range(3):  # into task 1
            run.round(rnd)
        memory = run.rounds.store[0]["memory"]
        with pytest.raises(ConfigError, match="scenario"):
            make_config({**TINY, "replay": "exemplars"})
    run_experiment(make_config(CONTINUAL), tmp_path / "plain")
    replay, plain = _rows(tmp_path / "replay"), _rows(tmp_path / "plain")
    assert replay[:3] == plain[:3]  # task 0: nothing to rehearse yet
    assert replay[3]["test_loss"] != plain[3]["test_loss"]  # task 1 rehearses task 0
    # client 0's memory: task 0's first four samples to rehearse, task 1's kept for later
    fed = run.fed
    task0 = fed.continual.plan.indices[0][0][:4]
    assert int(memory["task"]) == 1 and int(memory["last"]["n"]) == 4
    assert torch.equal(memory["last"]["y"], fed.dataset.y_train[torch.from_numpy(task0.copy())])
    assert set(memory["this"]["y"].tolist()) <= set(fed.continual.plan.classes[0][1])


def test_the_documented_tracker_writes_every_record_once_across_a_resume(tmp_path):
    import csv

    from fedretain.experiments.outputs import strangers

    cfg = {**TINY, "rounds": 4, "checkpoint_every": 2, "tracking": "csv"}
    with example("A tracker", "tracker", "fedretain.experiments.tracking"):
        run_experiment(make_config(cfg), tmp_path / "whole")
        run_experiment(make_config({**cfg, "stop_after": 1e-9}), tmp_path / "cut")
        paused = list(csv.DictReader((tmp_path / "cut" / "metrics.csv").open()))
        run_experiment(make_config(cfg), tmp_path / "cut", resume=True)
        assert strangers(tmp_path / "whole") == []  # metrics.csv is the run's (files=)
    for folder in ("whole", "cut"):
        rows = list(csv.DictReader((tmp_path / folder / "metrics.csv").open()))
        records = read_jsonl(tmp_path / folder / "metrics.jsonl")
        assert [int(r["round"]) for r in rows] == [r["round"] for r in records] == [0, 1, 2, 3, 4]
        assert [float(r["test_accuracy"]) for r in rows] == [r["test_accuracy"] for r in records]
    assert 1 <= len(paused) < 5  # the pause came before the end
    assert strangers(tmp_path / "whole") == ["metrics.csv"]  # unregistered: a user's file
    with pytest.raises(ConfigError, match="unknown tracker 'csv'"):
        make_config(cfg)
