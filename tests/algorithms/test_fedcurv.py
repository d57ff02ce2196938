"""FedCurv against numbers computed by hand.

On the one-weight model of tests/tiny.py (loss ½(wx − y)²) the per-sample gradient is
``(wx − y)x``, so the Fisher is client 0: ``(w − 2)²``; client 1 (two copies of x = 2, y = 0):
``(4w)²``. ``lr = 0.1``, one full-batch step per epoch.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import vmap

from fedretain.algorithms import build_algorithm
from fedretain.algorithms.fedcurv import curvature_penalty, fedcurv, fisher_diag
from fedretain.core.algorithm import ClientContext, RoundInfo
from fedretain.core.task import Task
from fedretain.errors import ConfigError
from fedretain.losses.ce import ce
from fedretain.losses.tce import tce
from fedretain.recipe.config import load_config
from tests.tiny import run_rounds, tiny_engine, w

INFO = RoundInfo(round=0, num_clients=2, clients=(0,), lr=0.1, seed=0)


def _value(state, key):
    return float(state[key]["weight"].reshape(()))


def _ctx(task=None):
    return ClientContext(task=task, info=INFO, client_id=0, num_samples=1, data={})


# --------------------------------------------------------------------------- penalty


def test_penalty_and_its_gradient_by_hand():
    algo = fedcurv(lambda_=0.1)
    theta = {"w": torch.tensor([1.0, 2.0])}
    down = {
        "x": {"w": torch.zeros(2)},
        "U": {"w": torch.tensor([3.0, 1.0])},
        "V": {"w": torch.tensor([2.0, 4.0])},
        "buffers": {},
    }
    own = {"u": {"w": torch.tensor([1.0, 0.0])}, "v": {"w": torch.tensor([0.5, 1.0])}}
    state = algo.local_init(down, own, _ctx())
    # U − u = (2, 1), V − v = (1.5, 3)
    torch.testing.assert_close(state["A"]["w"], torch.tensor([2.0, 1.0]))
    torch.testing.assert_close(state["B"]["w"], torch.tensor([1.5, 3.0]))
    penalty = curvature_penalty(0.1)
    # 0.1 · [1·2 − 2·1·1.5 + 4·1 − 2·2·3] = 0.1 · (−9)
    assert float(penalty(theta, state)) == pytest.approx(-0.9, abs=1e-6)
    leaf = theta["w"].clone().requires_grad_(True)
    (g,) = torch.autograd.grad(penalty({"w": leaf}, state), leaf)
    # 2λ (θ (U − u) − (V − v)) = 0.2 · ((2, 2) − (1.5, 3))
    torch.testing.assert_close(g, torch.tensor([0.1, -0.2]))


def test_penalty_is_the_sum_of_quadratics_up_to_a_constant():
    """λ Σ_j (θ − θ̂_j)ᵀ diag(F_j) (θ − θ̂_j), expanded with U − u_s = Σ F_j, V − v_s = Σ F_j θ̂_j."""
    g = torch.Generator().manual_seed(0)
    fs = [torch.rand(5, generator=g) for _ in range(3)]
    hats = [torch.randn(5, generator=g) for _ in range(3)]
    state = {"A": {"w": sum(fs)}, "B": {"w": sum(f * h for f, h in zip(fs, hats))}}
    penalty = curvature_penalty(0.3)

    def full(t):
        return 0.3 * sum(float((f * (t - h) ** 2).sum()) for f, h in zip(fs, hats))

    a, b = torch.randn(5, generator=g), torch.randn(5, generator=g)
    diff = float(penalty({"w": a}, state) - penalty({"w": b}, state))
    assert diff == pytest.approx(full(a) - full(b), rel=1e-5)


# --------------------------------------------------------------------------- Fisher


def _classifier_task(loss=ce):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3))
    return Task(model, loss, num_classes=3)


def _slow_fisher(task, params, data, loss):
    """Reference: one autograd call per (non-padding) sample, squared and averaged."""
    names = list(params)
    total = {k: torch.zeros_like(v) for k, v in params.items()}
    count = 0.0
    for i in range(len(data["y"])):
        if float(data["w"][i]) == 0:
            continue
        leaves = {k: v.clone().requires_grad_(True) for k, v in params.items()}
        logits = torch.func.functional_call(task.model, leaves, (data["x"][i : i + 1],))
        value = loss(logits, data["y"][i : i + 1], data["label_mask"]).sum()
        grads = torch.autograd.grad(value, [leaves[k] for k in names])
        for k, gk in zip(names, grads):
            total[k] += gk**2
        count += 1
    return {k: v / count for k, v in total.items()}


@pytest.mark.parametrize("loss", [ce, tce], ids=["ce", "tce"])
@pytest.mark.parametrize("chunk", [0, 1, 3])
def test_fisher_equals_a_per_sample_loop(loss, chunk):
    task = _classifier_task(loss)
    params, buffers = task.init()
    g = torch.Generator().manual_seed(1)
    y = torch.randint(0, 2, (7,), generator=g)
    data = {
        "x": torch.randn(7, 4, generator=g),
        "y": y,
        "w": torch.tensor([1.0, 1, 1, 1, 1, 0, 0]),  # the last two are padding
        "label_mask": torch.tensor([True, True, False]),
    }
    fast = fisher_diag(task, params, buffers, data, chunk)
    slow = _slow_fisher(task, params, data, loss)
    for k in params:
        torch.testing.assert_close(fast[k], slow[k], rtol=1e-5, atol=1e-7)


def test_fisher_under_vmap_over_clients_equals_each_client_alone():
    task = _classifier_task()
    params, buffers = task.init()
    g = torch.Generator().manual_seed(2)
    stacked_params = {k: v + 0.1 * torch.randn(3, *v.shape, generator=g) for k, v in params.items()}
    data = {
        "x": torch.randn(3, 5, 4, generator=g),
        "y": torch.randint(0, 3, (3, 5), generator=g),
        "w": torch.tensor([[1.0, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]]),
        "label_mask": torch.ones(3, 3, dtype=torch.bool),
    }
    together = vmap(lambda p, d: fisher_diag(task, p, buffers, d))(stacked_params, data)
    for k in range(3):
        alone = fisher_diag(
            task,
            {n: v[k] for n, v in stacked_params.items()},
            buffers,
            {n: v[k] for n, v in data.items()},
        )
        for n in params:
            torch.testing.assert_close(together[n][k], alone[n], rtol=1e-5, atol=1e-7)


def test_fisher_of_ce_is_the_squared_score_of_the_true_label():
    # logistic regression without bias: ∇_W log p(y|x) = (onehot(y) − p) xᵀ
    model = nn.Linear(2, 3, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[0.5, -1.0], [0.0, 0.3], [1.0, 0.2]]))
    task = Task(model, ce, num_classes=3)
    params, buffers = task.init()
    x = torch.tensor([[1.0, 2.0], [-1.0, 0.5]])
    y = torch.tensor([2, 0])
    data = {"x": x, "y": y, "w": torch.ones(2), "label_mask": torch.ones(3, dtype=torch.bool)}
    p = torch.softmax(x @ params["weight"].T, dim=-1)
    scores = (F.one_hot(y, 3) - p).unsqueeze(-1) * x.unsqueeze(1)  # (2, 3, 2)
    expected = (scores**2).mean(dim=0)
    torch.testing.assert_close(fisher_diag(task, params, buffers, data)["weight"], expected)


# --------------------------------------------------------------------------- federation


def test_first_round_is_fedavg_and_the_server_sums_the_fishers():
    engine = tiny_engine(build_algorithm("fedcurv", **{"lambda": 0.1}))
    state = run_rounds(engine, 1)
    # U = V = 0 in round 1: clients reach 1.1 and 0.6 as FedAvg's
    assert w(state) == pytest.approx((1.1 + 2 * 0.6) / 3, abs=1e-6)
    u0, u1 = (1.1 - 2) ** 2, (4 * 0.6) ** 2  # 0.81, 5.76
    assert _value(state, "U") == pytest.approx(u0 + u1, abs=1e-5)  # a sum, not a mean
    assert _value(state, "V") == pytest.approx(u0 * 1.1 + u1 * 0.6, abs=1e-5)
    assert _value(engine.store[0], "u") == pytest.approx(u0, abs=1e-5)
    assert _value(engine.store[0], "v") == pytest.approx(u0 * 1.1, abs=1e-5)
    assert _value(engine.store[1], "u") == pytest.approx(u1, abs=1e-5)


def test_second_round_pulls_each_client_towards_the_other_only():
    engine = tiny_engine(build_algorithm("fedcurv", **{"lambda": 0.1}))
    state = run_rounds(engine, 1)
    x = (1.1 + 2 * 0.6) / 3
    u0, u1 = 0.81, 5.76
    v0, v1 = u0 * 1.1, u1 * 0.6
    # client 0 subtracts its own (u0, v0): penalty gradient 2λ(θ u1 − v1) pulls it to 0.6
    y0 = x - 0.1 * ((x - 2) + 0.2 * (x * u1 - v1))
    # client 1 subtracts its own: pulled towards client 0's 1.1
    y1 = x - 0.1 * (4 * x + 0.2 * (x * u0 - v0))
    state, _ = engine.run_round(state, 1, 0.1, per_round=2)
    assert w(state) == pytest.approx((y0 + 2 * y1) / 3, abs=1e-5)
    u0n, u1n = (y0 - 2) ** 2, (4 * y1) ** 2
    assert _value(state, "U") == pytest.approx(u0n + u1n, abs=1e-4)
    assert _value(state, "V") == pytest.approx(u0n * y0 + u1n * y1, abs=1e-4)


def test_an_absent_client_keeps_its_contribution_in_the_sums():
    engine = tiny_engine(build_algorithm("fedcurv", **{"lambda": 0.1}))
    state = run_rounds(engine, 1)
    x = (1.1 + 2 * 0.6) / 3
    u1, v1 = 5.76, 5.76 * 0.6
    y0 = x - 0.1 * ((x - 2) + 0.2 * (x * u1 - v1))
    state, _ = engine.run_round(state, 1, 0.1, clients=np.array([0]))
    assert w(state) == pytest.approx(y0, abs=1e-5)
    # U = client 0's new Fisher + client 1's from round 1
    assert _value(state, "U") == pytest.approx((y0 - 2) ** 2 + u1, abs=1e-4)
    assert _value(state, "V") == pytest.approx((y0 - 2) ** 2 * y0 + v1, abs=1e-4)


def test_without_memory_the_sums_are_the_last_rounds_and_nothing_is_kept():
    engine = tiny_engine(build_algorithm("fedcurv", **{"lambda": 0.1, "memory": False}))
    state = run_rounds(engine, 1)
    assert _value(state, "U") == pytest.approx(0.81 + 5.76, abs=1e-5)
    assert len(engine.store) == 0
    x = (1.1 + 2 * 0.6) / 3
    # no subtraction: client 0 sees both clients' terms
    U, V = 0.81 + 5.76, 0.81 * 1.1 + 5.76 * 0.6
    y0 = x - 0.1 * ((x - 2) + 0.2 * (x * U - V))
    state, _ = engine.run_round(state, 1, 0.1, clients=np.array([0]))
    assert w(state) == pytest.approx(y0, abs=1e-5)
    assert _value(state, "U") == pytest.approx((y0 - 2) ** 2, abs=1e-4)  # client 1 dropped


def test_zero_lambda_is_fedavg():
    a = run_rounds(tiny_engine(build_algorithm("fedcurv", **{"lambda": 0.0}), epochs=2), 3)
    b = run_rounds(tiny_engine(build_algorithm("fedavg"), epochs=2), 3)
    assert w(a) == pytest.approx(w(b), abs=1e-6)


def test_payloads_are_three_times_fedavgs():
    curv = tiny_engine(build_algorithm("fedcurv"))
    avg = tiny_engine(build_algorithm("fedavg"))
    run_rounds(curv, 2)
    run_rounds(avg, 2)
    assert curv.ledger.bytes_up == 3 * avg.ledger.bytes_up
    assert curv.ledger.bytes_down == 3 * avg.ledger.bytes_down
    assert set(curv.ledger.by_key["up"]) == {"y", "du", "dv", "buffers"}
    assert set(curv.ledger.by_key["down"]) == {"x", "U", "V", "buffers"}


def test_bad_hyperparameters_are_one_line_errors():
    with pytest.raises(ConfigError, match=r"algo\.lambda must be >= 0, got -1"):
        build_algorithm("fedcurv", **{"lambda": -1.0})
    with pytest.raises(ConfigError, match=r"algo\.fisher_chunk"):
        build_algorithm("fedcurv", fisher_chunk=-2)
    with pytest.raises(ConfigError, match=r"unknown key 'algo\.lam'.*algo\.lambda"):
        build_algorithm("fedcurv", lam=1.0)


def test_lambda_is_a_config_key():
    cfg = load_config(None, ["algorithm=fedcurv", "algo.lambda=1e-3"])
    assert cfg.algo == {"lambda": 1e-3}
    assert build_algorithm("fedcurv", **cfg.algo).hparams["lambda"] == 1e-3
