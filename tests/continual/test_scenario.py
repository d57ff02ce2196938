"""The continual scenario: task switching, the current-task-only data rule, seen-class
evaluation, the accuracy matrix and its measures, exact resume across task boundaries."""

import json
from dataclasses import replace

import numpy as np
import pytest
import torch

from fedretain.cli import main
from fedretain.continual.tasks import class_incremental_tasks, seen_classes
from fedretain.engines.sequential import SequentialEngine
from fedretain.errors import ConfigError
from fedretain.experiments.run import Run, run_experiment
from fedretain.files import read_jsonl, write_toml
from fedretain.metrics.continual import average_accuracy, average_forgetting, backward_transfer
from fedretain.recipe.config import config_from_text, load_config, make_config, resolved
from fedretain.recipe.federation import build_federation, describe_task_plan

CI = {
    "dataset": "digits",
    "model": "mlp",
    "model.hidden": [16],
    "scenario": "class_incremental",
    "scenario.tasks": 3,
    "scenario.classes_per_task": 2,
    "scenario.rounds_per_task": 2,
    "rounds": 6,
    "clients": 3,
    "clients_per_round": 3,
    "batch_size": 16,
    "local_steps": 3,
    "lr": 0.1,
    "engine": "sequential",
    "threads": 1,
}


def _strip(rows):
    return [{k: v for k, v in r.items() if k != "seconds"} for r in rows]


def test_measures_by_hand():
    r = [[0.9, 0.1, 0.0], [0.6, 0.8, 0.1], [0.5, 0.7, 0.9]]
    assert average_accuracy(r) == pytest.approx((0.5 + 0.7 + 0.9) / 3)
    # task 0: max(0.9, 0.6) - 0.5 = 0.4; task 1: 0.8 - 0.7 = 0.1
    assert average_forgetting(r) == pytest.approx((0.4 + 0.1) / 2)
    assert backward_transfer(r) == pytest.approx(((0.5 - 0.9) + (0.7 - 0.8)) / 2)
    assert average_forgetting(r[:1]) == 0.0 and backward_transfer(r[:1]) == 0.0
    assert average_accuracy(r[:2]) == pytest.approx((0.6 + 0.8) / 2)


def test_config_refuses_what_a_scenario_cannot_run():
    with pytest.raises(ConfigError, match="set rounds=6"):
        make_config({**CI, "rounds": 5})
    with pytest.raises(ConfigError, match="task plan"):
        make_config({**CI, "partition": "dirichlet"})
    with pytest.raises(ConfigError, match=r"scenario\.tsks"):
        make_config({**CI, "scenario.tsks": 3})


ORDER = [[5, 4], [3, 2], [1, 0]]
FIXED = {
    **{k: v for k, v in CI.items() if k not in ("scenario.tasks", "scenario.classes_per_task")},
    "scenario.order": ORDER,
}


def test_fixed_order_reads_from_the_command_line_and_toml(tmp_path):
    flags = [f"{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in FIXED.items()]
    assert "scenario.order=[[5, 4], [3, 2], [1, 0]]" in flags
    cli = load_config(overrides=[*flags[:-1], "scenario.order=[[5,4],[3,2],[1,0]]"])
    toml = tmp_path / "fixed.toml"
    toml.write_text('[scenario]\nname = "class_incremental"\norder = [[5, 4], [3, 2], [1, 0]]\n')
    rest = [f for f in flags if f.split("=")[0] not in ("scenario", "scenario.order")]
    from_file = load_config(toml, rest)
    write_toml(tmp_path / "resolved.toml", resolved(cli))
    again = config_from_text((tmp_path / "resolved.toml").read_text())
    for cfg in (cli, from_file, again):
        fed = build_federation(cfg)
        assert fed.continual.scenario.tasks == 3 and fed.continual.scenario.classes_per_task == 2
        assert fed.continual.plan.classes == (((4, 5), (2, 3), (0, 1)),) * 3


def test_every_federation_has_a_scenario_and_its_rounds_take_their_clients_from_it():
    """The round's clients come from the federation's scenario, static or continual: the
    same clients every round, or those of the round's task; rounds_per_task and the task
    plan's text are the scenario's (none for a static one)."""
    static = build_federation(make_config({k: v for k, v in CI.items() if "scenario" not in k}))
    assert static.continual is None and static.scenario.rounds_per_task is None
    rounds = static.rounds(SequentialEngine())
    for rnd in (0, 5):
        assert static.clients_for_round(rnd) is static.clients
        rounds.open(static.algorithm.server_init(*static.task.init()), rnd, 0.1, clients=[0])
        assert rounds.clients is static.clients
    assert static.scenario.describe() is None
    fed = build_federation(make_config(CI))
    per_task = fed.scenario.rounds_per_task
    assert fed.continual is fed.scenario and per_task == CI["scenario.rounds_per_task"]
    first, later = fed.clients_for_round(0), fed.clients_for_round(per_task)
    assert first.parts is not later.parts
    assert [sorted(set(fed.dataset.train_labels[p])) for p in later.parts[:1]] != [
        sorted(set(fed.dataset.train_labels[p])) for p in first.parts[:1]
    ]
    assert "task" in fed.scenario.describe()


def test_per_client_draw_stays_the_default():
    cfg = make_config(CI)
    assert "order" not in resolved(cfg)["scenario"]  # config.toml and checkpoints unchanged
    fed = build_federation(cfg)
    labels = fed.dataset.train_labels
    assert fed.continual.plan == class_incremental_tasks(labels, 10, 3, 3, 2, cfg.seed)


def test_fixed_order_run_evaluates_the_order_tasks_and_forgets(tmp_path):
    summary = run_experiment(make_config(FIXED), tmp_path, progress=False)
    assert summary["task_classes"] == [[4, 5], [2, 3], [0, 1]]
    matrix = summary["accuracy_matrix"]
    assert len(matrix) == 3 and summary["average_forgetting"] > 0
    text = describe_task_plan(make_config(FIXED), build_federation(make_config(FIXED)).dataset)
    assert text.startswith("class_incremental: 3 tasks x 2 rounds = 6 rounds, one class order")


def test_fixed_order_run_resumes_from_its_folder(tmp_path, capsys):
    cfg = make_config({**FIXED, "checkpoint_every": 100})
    run_experiment(cfg, tmp_path / "whole", progress=False)
    run = Run(cfg, tmp_path / "cut")
    run.start()
    for rnd in range(3):
        run.evaluate(run.round(rnd))
    run.checkpoint()
    assert main(["run", "--resume", str(tmp_path / "cut")]) == 0, capsys.readouterr().err
    for name in ("metrics.jsonl", "continual.jsonl"):
        assert _strip(read_jsonl(tmp_path / "cut" / name)) == _strip(
            read_jsonl(tmp_path / "whole" / name)
        )


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"scenario.tasks": 4}, "scenario.order has 3 tasks but scenario.tasks=4; set "),
        ({"scenario.classes_per_task": 3}, "set scenario.classes_per_task=2 or leave it out"),
        ({"scenario.order": [[5, 4], [3, 5], [1, 0]]}, "class 5 appears twice in scenario."),
        ({"scenario.order": [[5, 4], [], [1, 0]]}, "task 1 of scenario.order is empty"),
        ({"scenario.order": [[5, 4], [3, "2"], [1, 0]]}, "scenario.order has '2' in task 1"),
        ({"scenario.order": "5,4"}, "scenario.order must be a non-empty list of tasks"),
        ({"scenario.order": [[5, 4], [3, 2]]}, "set rounds=4"),
    ],
)
def test_config_refuses_a_bad_class_order(changes, words):
    with pytest.raises(ConfigError) as e:
        make_config({**FIXED, **changes})
    assert words in str(e.value) and "\n" not in str(e.value)


def test_class_out_of_range_for_the_dataset_is_one_line_exit_2(tmp_path, capsys):
    args = [f"{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in FIXED.items()]
    args[-1] = "scenario.order=[[5,4],[3,2],[1,10]]"
    assert main(["run", *args, "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "error: class 10 in task 2 of scenario.order is out of range for the dataset's 10 "
        "classes; use class ids 0..9"
    ]


def test_clients_see_only_their_current_task_and_evaluation_uses_seen_classes(tmp_path):
    cfg = make_config(CI)
    run = Run(cfg, tmp_path)
    run.start()
    plan = run.fed.continual.plan
    seen = []
    algo = run.rounds.algorithm
    base_init = algo.local_init

    def spy(down, client_state, ctx):
        seen.append((ctx.info.round, ctx.client_id, ctx.data["y"].clone()))
        return base_init(down, client_state, ctx)

    run.rounds.algorithm = replace(algo, local_init=spy)
    y_train = run.fed.dataset.y_train
    for rnd in range(cfg.rounds):
        metrics = run.round(rnd)
        task = rnd // 2
        for cid in range(3):  # the clients' parts are this task's, and nothing else
            np.testing.assert_array_equal(run.rounds.clients.parts[cid], plan.indices[cid][task])
        record = run.evaluate(metrics)
        assert record["task"] == task
        # the reported accuracy is on the test samples of the classes seen so far
        p, b = run.fed.algorithm.global_model(run.server_state)
        y = run.fed.dataset.y_test
        mask = np.isin(y.numpy(), seen_classes(plan, task))
        acc, _ = run.fed.task.evaluate(p, b, run.fed.dataset.x_test[mask], y[mask])
        assert record["test_accuracy"] == pytest.approx(acc)
    assert len(seen) == 3 * cfg.rounds
    for rnd, cid, y in seen:
        task = rnd // 2
        expected = y_train[torch.from_numpy(plan.indices[cid][task].copy())]
        assert torch.equal(y, expected)  # exactly this task's samples
        assert set(y.tolist()) == set(plan.classes[cid][task])
    # the data API has no way back
    with pytest.raises(ConfigError, match="cannot go back"):
        run.fed.continual.data.advance_to(0)


def test_run_writes_the_matrix_measures_and_plots(tmp_path):
    summary = run_experiment(make_config(CI), tmp_path, progress=False)
    matrix = summary["accuracy_matrix"]
    assert len(matrix) == 3 and all(len(row) == 3 for row in matrix)
    assert summary["average_forgetting"] == pytest.approx(average_forgetting(matrix))
    assert summary["backward_transfer"] == pytest.approx(backward_transfer(matrix))
    assert summary["average_accuracy"] == pytest.approx(average_accuracy(matrix))
    rows = read_jsonl(tmp_path / "continual.jsonl")
    assert [r["round"] for r in rows] == list(range(7))
    assert [r["round"] for r in rows if r["task_end"]] == [2, 4, 6]
    assert [r["task_accuracy"] for r in rows if r["task_end"]] == matrix
    metrics = read_jsonl(tmp_path / "metrics.jsonl")
    assert [m["test_accuracy"] for m in metrics] == [r["seen_accuracy"] for r in rows]
    assert json.loads((tmp_path / "summary.json").read_text())["accuracy_matrix"] == matrix
    for png in ("continual_accuracy.png", "accuracy_matrix.png", "accuracy.png"):
        assert (tmp_path / png).stat().st_size > 0


def test_task_ends_are_evaluated_whatever_eval_every(tmp_path):
    summary = run_experiment(make_config({**CI, "eval_every": 5}), tmp_path, progress=False)
    assert len(summary["accuracy_matrix"]) == 3
    assert [r["round"] for r in read_jsonl(tmp_path / "metrics.jsonl")] == [0, 2, 4, 5, 6]


ACGAN = {
    "model": "acgan",
    "model.width": 4,
    "model.z_dim": 16,
    "replay": "acgan",
    "optimizer": "adam",
    "lr": 1e-3,
    "local_steps": 2,
}
DGR = {
    "replay": "dgr",
    "replay.width": 4,
    "replay.z_dim": 16,
    "optimizer": "adam",
    "lr": 1e-3,
    "local_steps": 2,
}
METHODS = {
    "fedavg": {"algorithm": "fedavg"},
    "fedprox": {"algorithm": "fedprox"},
    "fedlwf2t": {"algorithm": "fedlwf2t"},
    "fedavg+acgan": {"algorithm": "fedavg", **ACGAN},
    "fedprox+acgan": {"algorithm": "fedprox", **ACGAN},
    "fedavg+dgr": {"algorithm": "fedavg", **DGR},
    "fedprox+dgr": {"algorithm": "fedprox", **DGR},
    "fedprox+dgr, store=disk": {"algorithm": "fedprox", **DGR, "store": "disk"},
    "fedcil": {
        "algorithm": "fedcil",
        **{k: v for k, v in ACGAN.items() if k != "replay"},
        "algo.consolidation_steps": 2,
        "algo.consolidation_batch": 4,
    },
}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """method -> (config, folder of its uninterrupted run), each run once for the module."""
    runs: dict = {}

    def get(method: str):
        if method not in runs:
            overrides = {k: v for k, v in METHODS[method].items() if k != "model.hidden"}
            base = {
                k: v for k, v in CI.items() if not (k == "model.hidden" and "model" in overrides)
            }
            cfg = make_config({**base, **overrides, "checkpoint_every": 100})
            folder = tmp_path_factory.mktemp(f"whole-{method}")
            run_experiment(cfg, folder, progress=False)
            runs[method] = (cfg, folder)
        return runs[method]

    return get


@pytest.mark.parametrize("stop", [2, 3])  # at a task boundary and inside a task
@pytest.mark.parametrize("method", list(METHODS))
def test_resume_inside_and_across_task_boundaries_is_exact(tmp_path, stop, method, uninterrupted):
    cfg, whole_dir = uninterrupted(method)
    run = Run(cfg, tmp_path / "cut")
    run.start()
    for rnd in range(stop):
        run.evaluate(run.round(rnd))
    run.checkpoint()
    run_experiment(cfg, tmp_path / "cut", progress=False, resume=True)
    for name in ("metrics.jsonl", "continual.jsonl"):
        assert _strip(read_jsonl(tmp_path / "cut" / name)) == _strip(read_jsonl(whole_dir / name))
    whole = json.loads((whole_dir / "summary.json").read_text())
    cut = json.loads((tmp_path / "cut" / "summary.json").read_text())
    for key in ("accuracy_matrix", "average_forgetting", "backward_transfer", "final_accuracy"):
        assert cut[key] == whole[key]


def test_partition_shows_the_task_plan():
    cfg = make_config(CI)
    fed = build_federation(cfg)
    text = describe_task_plan(cfg, fed.dataset)
    assert text.startswith("class_incremental: 3 tasks x 2 rounds = 6 rounds")
    assert "client 2" in text and "task 2" in text
    assert describe_task_plan(make_config({"dataset": "digits"}), fed.dataset) is None


@pytest.mark.slow  # the in-process resume across task boundaries above stays in the default suite
def test_sigkill_inside_a_task_then_resume_matches_uninterrupted(tmp_path):
    """A continual run with generative replay killed by SIGKILL in its second task resumes
    (client states, task switch, continual.jsonl) to the uninterrupted run's numbers."""
    import os
    import subprocess
    import sys

    from tests.experiments.test_resume import kill_at_checkpoint

    settings = {
        **{k: v for k, v in CI.items() if k != "model.hidden"},
        **METHODS["fedavg+acgan"],
        "scenario.rounds_per_task": 4,
        "rounds": 12,
        "local_steps": 4,
        "checkpoint_every": 1,
    }
    args = [f"{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in settings.items()]
    cli = [sys.executable, "-m", "fedretain.cli", "run"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    killed = tmp_path / "killed"
    kill_at_checkpoint([*cli, *args, "--out", str(killed)], killed, env, 5)
    assert not (killed / "summary.json").exists()
    resumed = subprocess.run([*cli, "--resume", str(killed)], env=env, capture_output=True)
    assert resumed.returncode == 0, resumed.stderr
    full = tmp_path / "full"
    subprocess.run([*cli, *args, "--out", str(full)], env=env, check=True, capture_output=True)
    for name in ("metrics.jsonl", "continual.jsonl"):
        assert _strip(read_jsonl(killed / name)) == _strip(read_jsonl(full / name))


@pytest.mark.parametrize("method", ["fedlwf2t", "fedavg+acgan", "fedprox+dgr", "fedcil"])
def test_clients_on_threads_give_the_one_thread_runs_numbers(tmp_path, method):
    # engine.workers=2 on one torch thread: the run's model is copied per thread, while DGR's
    # generator is the algorithm's own module, shared by the threads (one forward at a time)
    overrides = {k: v for k, v in METHODS[method].items() if k != "model.hidden"}
    base = {k: v for k, v in CI.items() if not (k == "model.hidden" and "model" in overrides)}
    for name, extra in (("one", {}), ("two", {"engine.workers": 2})):
        run_experiment(make_config({**base, **overrides, **extra}), tmp_path / name, progress=False)
    rows = [_strip(read_jsonl(tmp_path / d / "metrics.jsonl")) for d in ("one", "two")]
    assert rows[0] == rows[1] and len(rows[0]) > 1
