"""Forgetting diagnostics: FedReg's loss(t-1)/loss(t) and TCE's F_ki, by hand and in a run."""

import json
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fedretain.core.task import Task
from fedretain.data.base import Dataset
from fedretain.experiments.run import run_experiment
from fedretain.files import read_jsonl
from fedretain.losses import get_loss
from fedretain.metrics.forgetting import Forgetting
from fedretain.recipe.config import make_config

# four 1-d points of two classes; client c holds point c
X = torch.tensor([[1.0], [-1.0], [2.0], [-2.0]])
Y = torch.tensor([1, 0, 1, 0])
PARTS = [np.array([c]) for c in range(4)]


def _model(w: float, b: float) -> tuple[dict, dict]:
    # logits = [0, w x + b]: class 1 wins when w x + b > 0
    return {"weight": torch.tensor([[0.0], [w]]), "bias": torch.tensor([0.0, b])}, {}


def _loss_acc(model, c):
    p = model[0]
    logits = X[c : c + 1] @ p["weight"].T + p["bias"]
    return float(F.cross_entropy(logits, Y[c : c + 1])), float(logits.argmax(1) == Y[c])


def test_loss_increase_and_f_matrix_by_hand():
    task = Task(nn.Linear(1, 2), get_loss("ce"), 2)
    ds = Dataset("pts", X, Y, X, Y, num_classes=2)
    diag = Forgetting(task, ds, PARTS, None)
    g0 = _model(1.0, 0.0)  # classifies every point right
    first = diag.round(0, g0, {0: _model(1.0, 0.0), 1: _model(1.0, 0.0)})
    assert "loss_prev" not in first  # no previous round yet
    g1 = _model(1.0, 0.0)
    local = {2: _model(1.0, 5.0), 3: _model(1.0, -5.0)}  # each drifts to its own class
    rec = diag.round(1, g1, local)
    assert rec["prev_clients"] == [0, 1] and rec["clients"] == [2, 3]
    for n, c in enumerate([0, 1]):
        assert rec["loss_prev"][n] == pytest.approx(_loss_acc(g1, c)[0], rel=1e-6)
        mean_now = np.mean([_loss_acc(m, c)[0] for m in local.values()])
        assert rec["loss_now"][n] == pytest.approx(mean_now, rel=1e-6)
    assert rec["loss_increase_mean"] > 0
    # F_ki = Acc_k(local i) - Acc_k(global): client 2 (x=2, class 1) under local 3 (b=-5):
    # 2 - 5 < 0 -> class 0, wrong; client 3 (x=-2, class 0) under local 2: -2 + 5 > 0, wrong
    assert rec["F"] == [[0.0, -1.0], [-1.0, 0.0]]
    assert rec["F_k"] == [-1.0, -1.0] and rec["F_on"] == "train"


def test_rounds_of_one_client_have_no_f_k_mean():
    """F_k compares a client with the other clients of its round: with one client a round
    there is none, and the summary says None (no NaN, no warning)."""
    task = Task(nn.Linear(1, 2), get_loss("ce"), 2)
    ds = Dataset("pts", X, Y, X, Y, num_classes=2)
    diag = Forgetting(task, ds, PARTS, None)
    diag.round(0, _model(1.0, 0.0), {0: _model(1.0, 0.0)})
    diag.round(1, _model(1.0, 0.0), {1: _model(1.0, 5.0)})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        summary = diag.summary()
    assert summary["F_k_mean"] is None and summary["loss_increase_mean"] is not None
    diag.round(2, _model(1.0, 0.0), {2: _model(1.0, 5.0), 3: _model(1.0, -5.0)})
    assert diag.summary()["F_k_mean"] == -1.0  # the one round of two clients alone


DIGITS = {
    "dataset": "digits",
    "model": "mlp",
    "model.hidden": [32],
    "clients": 20,
    "clients_per_round": 5,
    "batch_size": 10,
    "local_epochs": 2,
    "lr": 0.1,
    "partition": "shards",
    "partition.classes_per_client": 1,
    "algorithm": "fedavg",
    "rounds": 3,
    "val_fraction": 0.2,
    "diagnostics": "forgetting",
}


def test_forgetting_run_writes_records_and_plots(tmp_path):
    summary = run_experiment(make_config(DIGITS), tmp_path / "seq", progress=False)
    rows = read_jsonl(tmp_path / "seq" / "forgetting.jsonl")
    assert [r["round"] for r in rows] == [1, 2, 3]
    assert all(r["F_on"] == "validation" and len(r["F"]) == 5 for r in rows)
    # one-class clients: a round's local training raises the loss on the last round's clients
    assert all(r["loss_now_mean"] > r["loss_prev_mean"] for r in rows[1:])
    assert all("fisher_corr" not in r for r in rows)  # opt-in: diagnostics.fisher=true
    assert (tmp_path / "seq" / "forgetting.png").exists()
    assert (tmp_path / "seq" / "forgetting-3.png").exists()
    assert summary["forgetting"]["loss_increase_mean"] > 0
    # the vectorised engine sees the same local models
    run_experiment(make_config({**DIGITS, "engine": "vmap"}), tmp_path / "vm", progress=False)
    vm = read_jsonl(tmp_path / "vm" / "forgetting.jsonl")
    for a, b in zip(rows[1:], vm[1:], strict=True):
        assert a["clients"] == b["clients"]
        assert np.allclose(a["loss_now"], b["loss_now"], rtol=1e-4)
        assert np.allclose(a["F"], b["F"], atol=1e-6)


def test_forgetting_survives_resume(tmp_path):
    run_experiment(make_config({**DIGITS, "rounds": 2}), tmp_path, progress=False)
    run_experiment(make_config(DIGITS), tmp_path, progress=False, resume=True)
    rows = read_jsonl(tmp_path / "forgetting.jsonl")
    assert [r["round"] for r in rows] == [1, 2, 3] and "loss_prev" in rows[2]
    assert json.loads((tmp_path / "summary.json").read_text())["forgetting"]


def test_fisher_correlation_is_measured_when_asked(tmp_path):
    run_experiment(
        make_config({**DIGITS, "rounds": 2, "diagnostics.fisher": True}), tmp_path, progress=False
    )
    rows = read_jsonl(tmp_path / "forgetting.jsonl")
    assert "fisher_corr" not in rows[0] and len(rows[1]["fisher_corr"]) == 5
    assert all(-1 <= c <= 1 for c in rows[1]["fisher_corr"])


def test_fisher_correlation_is_pearson_of_pseudo_and_previous_fishers():
    from fedretain.algorithms.fedcurv import fisher_diag
    from fedretain.algorithms.fedreg import PseudoData
    from fedretain.core.tree import ravel

    task = Task(nn.Linear(1, 2), get_loss("ce"), 2)
    ds = Dataset("pts", X, Y, X, Y, num_classes=2)
    diag = Forgetting(task, ds, PARTS, None, pseudo=PseudoData(steps=0))  # pseudo x = real x
    start, local = _model(0.5, 0.2), _model(1.5, -0.3)
    own, prev = np.array([0, 3]), np.array([1, 2])
    got = diag._fisher_corr(start, local, own, prev)
    soft = torch.softmax(X[own] @ start[0]["weight"].T + start[0]["bias"], dim=-1)
    a = ravel(fisher_diag(task, *local, {"x": X[own], "y": soft, "w": torch.ones(2)}))
    b = ravel(fisher_diag(task, *local, {"x": X[prev], "y": Y[prev], "w": torch.ones(2)}))
    expected = float(np.corrcoef(a.double().numpy(), b.double().numpy())[0, 1])
    assert got == pytest.approx(expected, abs=1e-9)
    assert diag._fisher_corr(start, local, own, own) < 1.0  # soft vs true labels differ


def test_bad_diagnostics_are_refused():
    from fedretain.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown diagnostic 'forgeting'"):
        make_config({"diagnostics": "forgeting"})
    with pytest.raises(ConfigError, match=r"diagnostics\.rounds"):
        make_config({"diagnostics": "forgetting", "rounds": 5, "diagnostics.rounds": [9]})
    with pytest.raises(ConfigError, match=r"diagnostics\.fisher: expected true or false"):
        make_config({"diagnostics": "forgetting", "diagnostics.fisher": "yes"})
    with pytest.raises(ConfigError, match=r"diagnostics\.reference set, but no diagnostics"):
        make_config({"diagnostics.reference": "fedavg"})
    with pytest.raises(ConfigError, match=r"unknown diagnostics\.reference 'fedavgg'"):
        make_config({"diagnostics": "forgetting", "diagnostics.reference": "fedavgg"})


def test_reference_trains_from_the_same_global_models_on_the_same_batches(tmp_path):
    # FedAvg against itself as reference: same start, clients and mini-batches -> same loss(t)
    run_experiment(
        make_config({**DIGITS, "diagnostics.reference": "fedavg"}), tmp_path / "a", progress=False
    )
    rows = read_jsonl(tmp_path / "a" / "forgetting.jsonl")
    assert all(r["loss_now_ref"] == pytest.approx(r["loss_now"], rel=1e-6) for r in rows[1:])
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())["forgetting"]
    assert summary["loss_increase_ref_mean"] == pytest.approx(summary["loss_increase_mean"])


def test_reference_leaves_the_run_unchanged(tmp_path):
    # FedProx with a FedAvg reference: the run's metrics are those of the run without it,
    # and the reference's local models differ from the run's (no proximal pull)
    fedprox = {**DIGITS, "algorithm": "fedprox", "algo.mu": 1.0}
    run_experiment(make_config(fedprox), tmp_path / "plain", progress=False)
    run_experiment(
        make_config({**fedprox, "diagnostics.reference": "fedavg"}),
        tmp_path / "ref",
        progress=False,
    )

    def metrics(d):
        return [{k: v for k, v in r.items() if k != "seconds"} for r in read_jsonl(d)]

    assert metrics(tmp_path / "plain" / "metrics.jsonl") == metrics(
        tmp_path / "ref" / "metrics.jsonl"
    )
    plain = read_jsonl(tmp_path / "plain" / "forgetting.jsonl")
    ref = read_jsonl(tmp_path / "ref" / "forgetting.jsonl")
    for a, b in zip(plain[1:], ref[1:], strict=True):
        assert a["loss_now"] == b["loss_now"]
        # with the same start, the unconstrained FedAvg forgets more than FedProx (mu = 1)
        assert b["loss_now_ref_mean"] > b["loss_now_mean"]


def test_diagnostics_samples_caps_the_evaluated_samples_per_client():
    task = Task(nn.Linear(1, 2), get_loss("ce"), 2)
    ds = Dataset("pts", X, Y, X, Y, num_classes=2)
    parts = [np.array([0, 1, 2, 3]), np.array([1, 2])]
    diag = Forgetting(task, ds, parts, None, eval_samples=3)
    assert len(diag.eval_parts[0]) == 3 and set(diag.eval_parts[0]) <= {0, 1, 2, 3}
    assert diag.eval_parts[1].tolist() == [1, 2]  # small clients keep every sample
    again = Forgetting(task, ds, parts, None, eval_samples=3)
    assert again.eval_parts[0].tolist() == diag.eval_parts[0].tolist()  # seeded
    g = _model(1.0, 0.0)
    diag.round(0, g, {0: g, 1: g})
    rec = diag.round(1, g, {0: _model(1.0, 3.0), 1: g})
    kept = diag.eval_parts[0]
    expected = np.mean([_loss_acc(g, int(c))[0] for c in kept])
    assert rec["loss_prev"][0] == pytest.approx(expected, rel=1e-6)
